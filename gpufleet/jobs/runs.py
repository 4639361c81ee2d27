"""Past and running jobs: each run's record and merged log under $GPUFLEET_HOME/runs/<id>/."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError

RECORD = "run.json"
LOG = "output.log"  # every node's lines, `[node-K] line`, in arrival order, and progress lines


@dataclass
class RunRecord:
    id: str
    cluster: str
    cloud: str
    nodes: int
    launcher: str
    command: list[str]
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    status: str = "running"  # running | succeeded | failed | interrupted
    usd_per_hour: float | None = None  # on-demand catalog price of the nodes; 0 on local/ssh
    pid: int = field(default_factory=os.getpid)
    # pid's start time: a PID reused by another process does not keep a dead run "running"
    pid_started: str | None = field(default_factory=lambda: state.start_time(os.getpid()))
    # the job's own code (the first failing rank's), when the job ran: gpufleet exits 1 for any
    # job failure, so that a job's code is never read as one of gpufleet's (ExitCode)
    job_exit_code: int | None = None
    # `run --image`: the image, and the digest each node ran (records before it have neither)
    image: str | None = None
    digests: dict[str, str] = field(default_factory=dict)
    # `run --recover`: one entry per recovery, in order (jobs/recover.py Recovery.as_dict):
    # cause, nodes, mode, and the epoch seconds of detected/provisioned/synced/restarted
    recoveries: list[dict] = field(default_factory=list)

    @property
    def restarts(self) -> int:
        return len(self.recoveries)

    @property
    def cost_usd(self) -> float | None:
        """Estimated cost of the run's wall time (None when the price is not known), plus its
        replacements: the wall time already prices every node, waits included; each node a
        recovery replaced is priced once more from the loss's detection until the new one was
        provisioned (an upper bound: the old machine may be billed until it is terminated while
        the new one boots)."""
        if self.usd_per_hour is None:
            return None
        end = self.ended_at or time.time()
        total = self.usd_per_hour * (end - self.started_at) / 3600
        per_node = self.usd_per_hour / max(self.nodes, 1)
        for r in self.recoveries:
            if r.get("mode") in ("replace", "relaunch") and r.get("provisioned_at"):
                boot = r["provisioned_at"] - (r.get("detected_at") or r["provisioned_at"])
                total += per_node * len(r.get("nodes") or []) * max(boot, 0.0) / 3600
        return round(total, 4)

    def as_dict(self) -> dict:
        return {**asdict(self), "cost_usd": self.cost_usd}


def runs_dir() -> Path:
    return state.home() / "runs"


def run_dir(run_id: str) -> Path:
    return runs_dir() / run_id


class RunNotFound(GpufleetError):
    exit_code = ExitCode.USAGE

    def __init__(self, run_id: str, why: str = "no run"):
        super().__init__(f"{why} {run_id!r}", hint="`gpufleet runs` lists the runs")


def _save(rec: RunRecord) -> None:
    state.write_private(run_dir(rec.id) / RECORD, json.dumps(rec.as_dict(), indent=2) + "\n")


def load(run_id: str) -> RunRecord:
    """A run by id or unique id prefix."""
    matches = [run_id] if (run_dir(run_id) / RECORD).is_file() else []
    if not matches and runs_dir().is_dir():
        matches = [p.name for p in runs_dir().iterdir() if p.name.startswith(run_id)]
    if not matches:
        raise RunNotFound(run_id)
    if len(matches) > 1:
        raise RunNotFound(run_id, f"{len(matches)} runs start with")
    data = json.loads((run_dir(matches[0]) / RECORD).read_text())
    data.pop("cost_usd", None)
    data.setdefault("pid_started", None)  # recorded before start times were
    known = {f.name for f in fields(RunRecord)}
    rec = RunRecord(**{k: v for k, v in data.items() if k in known})
    if rec.status == "running" and not state.process_alive(rec.pid, rec.pid_started):
        rec.status = "lost"  # the CLI that ran it died without recording an end
    return rec


def all_runs() -> list[RunRecord]:
    """Every recorded run, oldest first."""
    if not runs_dir().is_dir():
        return []
    out = []
    for p in runs_dir().iterdir():
        if (p / RECORD).is_file():
            try:
                out.append(load(p.name))
            except (GpufleetError, ValueError, TypeError):
                continue
    return sorted(out, key=lambda r: r.started_at)


class Recorder:
    """Writes one run's record and log while `gpufleet run` runs (thread-safe)."""

    def __init__(self, rec: RunRecord):
        self.rec = rec
        run_dir(rec.id).mkdir(parents=True, exist_ok=True)
        self._log = open(run_dir(rec.id) / LOG, "a", buffering=1)  # noqa: SIM115 - closed in finish
        self._lock = threading.Lock()
        _save(rec)

    def line(self, node: str, text: str, is_err: bool = False) -> None:
        with self._lock:
            if not self._log.closed:
                self._log.write(f"[{node}] {text}\n")

    def progress(self, message: str) -> None:
        with self._lock:
            if not self._log.closed:
                self._log.write(f"gpufleet: {message}\n")

    def image(self, image: str, digests: dict[str, str]) -> None:
        """The run's container image and each node's digest of it, saved at once."""
        self.rec.image, self.rec.digests = image, dict(digests)
        _save(self.rec)

    def recovery(self, entry: dict) -> None:
        """One recovery ended (jobs/recover.py Recovery.as_dict): appended and saved at once."""
        self.rec.recoveries.append(dict(entry))
        _save(self.rec)

    def finish(self, exit_code: int, status: str, job_exit_code: int | None = None) -> None:
        self.rec.ended_at = time.time()
        self.rec.exit_code = exit_code
        self.rec.job_exit_code = job_exit_code
        self.rec.status = status
        _save(self.rec)
        with self._lock:
            self._log.close()


def read_log(run_id: str, node: str | None = None) -> list[str]:
    rec = load(run_id)
    text = (run_dir(rec.id) / LOG).read_text(errors="replace")
    return [ln for ln in text.splitlines() if node is None or ln.startswith(f"[{node}] ")]


def follow(run_id: str, emit, node: str | None = None, poll_s: float = 0.2) -> RunRecord:
    """Print the log, then new lines as they come, until the run has ended."""
    rec = load(run_id)
    path = run_dir(rec.id) / LOG
    with open(path, errors="replace") as f:
        partial = ""
        while True:
            ended = load(rec.id)
            chunk = f.read()  # read after the status: no line written before the end is missed
            lines = (partial + chunk).split("\n")
            partial = lines.pop()
            for ln in lines:
                if node is None or ln.startswith(f"[{node}] "):
                    emit(ln)
            if ended.status != "running":
                if partial and (node is None or partial.startswith(f"[{node}] ")):
                    emit(partial)
                return ended
            if not chunk:
                time.sleep(poll_s)
