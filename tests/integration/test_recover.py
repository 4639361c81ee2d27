"""Recovery on the sandbox through the real CLI (`gpufleet run --cloud local --nodes 3
--recover N --json -- train_resume.py`): a 3-node gloo DDP job on CPU (examples/train_resume.py
under torchrun, 1 rank per node) that checkpoints on the head.

Real: the CLI in a subprocess, sshd nodes on loopback, torchrun, gloo, the kill (SIGKILL of
node-1's sshd and every process of its sessions), the stop (SIGSTOP/SIGCONT), a rank's own exit
code, LocalProvisioner.replace. Faked: only the cloud's metadata server of the preemption test
(tests/fakes/metadata.py). The `--json` document (stdout) is checked against run.schema.json;
the job's lines and gpufleet's progress are read from stderr. Times are printed and, when
GPUFLEET_RECOVERY_FIGURES names a file, appended to it as one JSON line per test (the closing
note's figures); they are never asserted."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpufleet.provision.localprocs import _alive, sandbox_processes
from tests.faults.sandbox import Run, cluster_json, node_processes, signal_node, wait_no_leaks
from tests.integration.conftest import ROOT, cli_env, requires_sshd, requires_torch
from tests.integration.test_json_contract import check

pytestmark = [requires_sshd, requires_torch]

SEED, STEPS = 7, 14
STEP = re.compile(r"^\[node-0\] step (\d+) t=([\d.]+)$", re.M)
DONE = re.compile(r"^\[node-0\] done steps=(\d+) checksum=\S+ sha256=([0-9a-f]{64})$", re.M)
FAIL_CODE = 7


@dataclass
class CliRun(Run):
    """`gpufleet run --json`: stderr (progress and the job's lines) read line by line as Run
    reads its output, stdout (the run document) kept apart."""

    out: list[str] = field(default_factory=list)

    def document(self) -> dict:
        """The `--json` document, valid against run.schema.json."""
        text = "".join(self.out)
        assert text.strip(), "no --json document on stdout:\n" + "".join(self.lines)[-3000:]
        return check("run", text)


def start(home: Path, workdir: Path, name: str, sleep: float, *flags: str, **job: str) -> CliRun:
    """`gpufleet run` of train_resume.py on a new 3-node sandbox cluster `name`."""
    extra = [a for k, v in job.items() for a in (f"--{k.replace('_', '-')}", v)]
    argv = [
        sys.executable, "-m", "gpufleet", "run", "--cloud", "local", "--nodes", "3",
        "--name", name, "--workdir", str(workdir), "--json", *flags,
        "--", "train_resume.py", "--steps", str(STEPS), "--seed", str(SEED),
        "--sleep-per-step", str(sleep), "--ckpt-every", "2", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(home),
        cwd=ROOT,
        start_new_session=True,
    )
    run = CliRun(proc, time.monotonic())

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            run.lines.append(line)
            run.q.put(line)
        run.q.put(None)

    def keep() -> None:
        assert proc.stdout is not None
        run.out.extend(proc.stdout)

    run._reader = threading.Thread(target=pump, daemon=True)  # type: ignore[attr-defined]
    run._reader.start()  # type: ignore[attr-defined]
    out_reader = threading.Thread(target=keep, daemon=True)
    out_reader.start()
    run._out_reader = out_reader  # type: ignore[attr-defined]
    return run


def finish(run: CliRun, timeout: float) -> tuple[int, str, dict]:
    """Exit code, stderr, the --json document."""
    rc, _, err = run.finish(timeout=timeout)
    run._out_reader.join(10)  # type: ignore[attr-defined]
    return rc, err, run.document()


def workdir_with_script(tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    wd.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "train_resume.py", wd / "train_resume.py")
    return wd


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The uninterrupted run's final parameters (sha256), same seed, 3 nodes; run once for
    the module in a home of its own, everything under it stopped afterwards."""
    from tests.conftest import stop_everything_under

    home = tmp_path_factory.mktemp("gpufleet-home-baseline")
    tmp = tmp_path_factory.mktemp("baseline")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUFLEET_HOME", str(home))
        try:
            with start(home, workdir_with_script(tmp), "rb", 0.0) as run:
                rc, err, doc = finish(run, timeout=300)
            assert rc == 0 and doc["status"] == "succeeded", err[-3000:]
            assert doc["recoveries"] == [], doc
            done = DONE.search(err)
            assert done and int(done.group(1)) == STEPS, err[-3000:]
            yield done.group(2)
        finally:
            stop_everything_under(home)


def steps_of(err: str) -> list[tuple[int, float]]:
    return [(int(k), float(t)) for k, t in STEP.findall(err)]


def figures(test: str, r: dict | None, event_at: float | None, err: str, **more: object) -> dict:
    """One recovery's measured figures: printed, and appended as a JSON line to the file
    named by $GPUFLEET_RECOVERY_FIGURES (if set). Spans from the record's timeline: detect
    (the event -> detected_at), provision (-> provisioned_at: the old ranks stopped and, in
    replace mode, the new node up), sync (-> synced_at: workdir and checkpoint), restart
    (-> the first step printed after the restart); total: the event -> that step."""
    fig: dict = {"test": test, "event_at": event_at, **more}
    if r is not None:
        steps = steps_of(err)
        after = [(k, t) for k, t in steps if t > r["restarted_at"]]
        first_k, first_t = after[0]
        last_before = max(k for k, t in steps if t < r["restarted_at"])

        def span(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 2)

        fig.update(
            cause=r["cause"],
            mode=r["mode"],
            nodes=r["nodes"],
            detect_s=span(event_at, r["detected_at"]),
            provision_s=span(r["detected_at"], r["provisioned_at"]),
            # restart mode provisions nothing: sync counts from the detection (old ranks stopped)
            sync_s=span(r["provisioned_at"] or r["detected_at"], r["synced_at"]),
            restart_s=span(r["synced_at"], first_t),
            first_step_after_restart=first_k,
            last_step_before_restart=last_before,
            # steps done before the restart (the last may come after the event) and not in
            # the checkpoint it resumed from
            steps_lost=last_before - (first_k - 1),
            total_s=span(event_at, first_t),
        )
    line = json.dumps(fig, sort_keys=True)
    print("\nRECOVERY-FIGURES " + line)
    path = os.environ.get("GPUFLEET_RECOVERY_FIGURES")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
    return fig


def sshd_pid(home: Path, name: str, node: str) -> int | None:
    return (cluster_json(home, name) or {}).get("provider", {}).get("pids", {}).get(node)


def test_a_killed_node_is_replaced_and_the_job_resumes(gpufleet_home, tmp_path, uninterrupted):
    name = "rk"
    wd = workdir_with_script(tmp_path)
    with start(gpufleet_home, wd, name, 1.5, "--recover", "2", "--recover-mode", "replace") as run:
        assert run.wait_for(r"^\[node-0\] step 5 ", timeout=300), "".join(run.lines)[-3000:]
        old = node_processes(gpufleet_home, name, "node-1")
        assert old
        killed_at = time.time()
        signal_node(gpufleet_home, name, "node-1", signal.SIGKILL)
        rc, err, doc = finish(run, timeout=400)
    assert rc == 0, err[-4000:]
    assert doc["status"] == "succeeded" and len(doc["recoveries"]) == 1, doc
    r = doc["recoveries"][0]
    assert (r["attempt"], r["cause"], r["mode"], r["nodes"]) == (1, "lost", "replace", ["node-1"])
    steps = steps_of(err)
    after = [(k, t) for k, t in steps if t > r["restarted_at"]]
    before = [k for k, t in steps if t < killed_at]
    assert after and after[0][0] > 1, steps  # resumed from a checkpoint, not from step 1
    done = DONE.search(err)
    assert done and int(done.group(1)) == STEPS and done.group(2) == uninterrupted, err[-3000:]
    assert not [p for p in old if _alive(p)], "a process of the old node-1 is still running"
    assert "no rank of run" in err
    assert r["provisioned_at"] is not None  # a new node-1 was made
    fig = figures("killed", r, killed_at, err, last_step_before_event=max(before))
    print(
        f"kill -> first step after the restart: {fig['total_s']:.1f}s (detect "
        f"{fig['detect_s']:.1f}s, provision {fig['provision_s']:.1f}s, "
        f"sync {fig['sync_s']:.1f}s, "
        f"restart {fig['restart_s']:.1f}s); last step before the kill {max(before)}, resumed at "
        f"{after[0][0]}, steps lost {fig['steps_lost']}; sha256 {done.group(2)[:16]} == "
        "uninterrupted"
    )
    assert not wait_no_leaks(gpufleet_home, name)
    assert not sandbox_processes(name, "node-1")


def test_a_slow_node_is_not_replaced(gpufleet_home, tmp_path):
    """SIGSTOP on every process of node-1 for 10 s (below the loss confirmation), then SIGCONT."""
    name = "rs"
    stopped: list[int] = []
    wd = workdir_with_script(tmp_path)
    with start(gpufleet_home, wd, name, 1.0, "--recover", "2", "--recover-mode", "replace") as run:
        try:
            assert run.wait_for(r"^\[node-0\] step 3 ", timeout=300), "".join(run.lines)[-3000:]
            sshd_before = node_processes(gpufleet_home, name, "node-1")
            stopped = signal_node(gpufleet_home, name, "node-1", signal.SIGSTOP)
            stopped_at = time.time()
            time.sleep(10)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        rc, err, doc = finish(run, timeout=300)
    assert rc == 0, err[-4000:]
    print(f"\nslow node: {len(doc['recoveries'])} recoveries, status {doc['status']}")
    assert doc["status"] == "succeeded" and doc["recoveries"] == [], doc
    assert not re.search(r"^gpufleet: (recovery|node-1: confirming)", err, re.M), err[-3000:]
    times = [t for _, t in steps_of(err)]
    stall = max(b - a for a, b in zip(times, times[1:], strict=False))
    figures("slow", None, stopped_at, err, recoveries=0, longest_step_gap_s=round(stall, 2))
    print(f"slow node: longest gap between steps {stall:.1f}s (SIGSTOP 10 s), run succeeded")
    assert stall >= 9, times  # the stop did hold the job
    assert set(sshd_before) & set(stopped)
    assert not wait_no_leaks(gpufleet_home, name)


def test_a_preempted_node_is_replaced_with_no_step_lost(
    gpufleet_home, tmp_path, monkeypatch, uninterrupted
):
    """A spot notice for node-1 from a fake AWS metadata server (tests/fakes/metadata.py; the
    only fake): node-1's watcher SIGTERMs its rank, gpufleet's watch SIGTERMs every rank, the
    job saves after the current step and exits 143; node-1 is replaced and the job resumes at
    the step it stopped."""
    from tests.fakes.metadata import FakeMetadata

    name = "rp"
    wd = workdir_with_script(tmp_path)
    with FakeMetadata() as fake:
        monkeypatch.setenv("GPUFLEET_SANDBOX_METADATA", f"aws={fake.url()}/{{node}}")
        with start(gpufleet_home, wd, name, 1.5, "--recover", "2") as run:
            assert run.wait_for(r"^\[node-0\] step 5 ", timeout=300), "".join(run.lines)[-3000:]
            noticed = fake.preempt("node-1")
            assert run.wait_for("preemption notice on node-1", timeout=30)
            fake.state("node-1").preempted_at = None  # the new node-1 is another machine
            rc, err, doc = finish(run, timeout=400)
    assert rc == 0, err[-4000:]
    assert doc["status"] == "succeeded" and len(doc["recoveries"]) == 1, doc
    r = doc["recoveries"][0]
    assert (r["cause"], r["mode"], r["nodes"]) == ("preempted", "replace", ["node-1"]), r
    stopped = re.search(r"^\[node-0\] stopped by SIGTERM after step (\d+)", err, re.M)
    resumed = re.search(r"resumed_step=(\d+)", err.split("recovery 1 of")[1])
    assert stopped and resumed and stopped.group(1) == resumed.group(1), err[-3000:]  # none lost
    steps = steps_of(err)
    first = next((k, t) for k, t in steps if t > r["restarted_at"])
    assert first[0] == int(resumed.group(1)) + 1
    done = DONE.search(err)
    assert done and int(done.group(1)) == STEPS and done.group(2) == uninterrupted, err[-3000:]
    fig = figures("preempted", r, noticed, err, stopped_after_step=int(stopped.group(1)))
    assert fig["steps_lost"] == 0, fig
    print(
        f"preempted: notice -> first step after the restart {fig['total_s']:.1f}s (detect "
        f"{fig['detect_s']:.1f}s, provision {fig['provision_s']:.1f}s, sync {fig['sync_s']:.1f}s, "
        f"restart {fig['restart_s']:.1f}s); stopped after step {stopped.group(1)}, resumed at "
        f"{first[0]}: 0 steps lost"
    )
    assert not wait_no_leaks(gpufleet_home, name)


FAILING = {"fail_at_step": "5", "fail_rank": "1", "fail_code": str(FAIL_CODE)}
FAILED = re.compile(
    r"^\[node-1\] rank 1: failing on purpose with exit code (\d+) after step (\d+) t=([\d.]+)$",
    re.M,
)


def test_a_rank_exit_code_restarts_on_the_same_nodes(gpufleet_home, tmp_path, uninterrupted):
    """--recover-on-exit 7: rank 1 (node-1) exits 7 after step 5 on the first start only
    (train_resume.py --fail-at-step); the job is started again on the same nodes (node-1's
    sshd is the same process) and resumes from the step-4 checkpoint."""
    name = "rx"
    wd = workdir_with_script(tmp_path)
    flags = ("--recover", "1", "--recover-mode", "restart", "--recover-on-exit", str(FAIL_CODE))
    with start(gpufleet_home, wd, name, 0.5, *flags, **FAILING) as run:
        assert run.wait_for(r"^\[node-0\] step 1 ", timeout=300), "".join(run.lines)[-3000:]
        sshd_before = {n: sshd_pid(gpufleet_home, name, n) for n in ("node-0", "node-1", "node-2")}
        assert all(sshd_before.values()), sshd_before
        assert run.wait_for(r"^gpufleet: recovery 1 of 1", timeout=300), "".join(run.lines)[-3000:]
        assert run.wait_for(r"^\[node-0\] start .*restart_count=1 ", timeout=300)
        sshd_after = {n: sshd_pid(gpufleet_home, name, n) for n in sshd_before}
        alive_after = [n for n, p in sshd_before.items() if p and _alive(p)]
        rc, err, doc = finish(run, timeout=400)
    assert rc == 0, err[-4000:]
    assert sshd_after == sshd_before  # no node replaced: the same sshd processes
    assert alive_after == ["node-0", "node-1", "node-2"], alive_after
    assert doc["status"] == "succeeded" and len(doc["recoveries"]) == 1, doc
    r = doc["recoveries"][0]
    assert (r["attempt"], r["cause"], r["mode"]) == (1, "exit", "restart"), r
    assert "node-1 exited 7" in r["reason"], r
    assert sorted(r["nodes"]) == ["node-0", "node-1", "node-2"], r
    failed = FAILED.search(err)
    assert failed and (int(failed.group(1)), int(failed.group(2))) == (FAIL_CODE, 5), err[-3000:]
    assert len(FAILED.findall(err)) == 1  # not again after the restart
    resumed = re.search(r"restart_count=1 .*resumed_step=(\d+)", err)
    assert resumed and int(resumed.group(1)) == 4, err[-3000:]  # the step-4 checkpoint
    done = DONE.search(err)
    assert done and int(done.group(1)) == STEPS and done.group(2) == uninterrupted, err[-3000:]
    fig = figures("exit", r, float(failed.group(3)), err, exit_code=FAIL_CODE)
    print(
        f"rank exit {FAIL_CODE} -> first step after the restart: {fig['total_s']:.1f}s (detect "
        f"{fig['detect_s']:.1f}s, stop and sync {fig['sync_s']:.1f}s (same nodes: nothing "
        f"provisioned), restart {fig['restart_s']:.1f}s); resumed at "
        f"{fig['first_step_after_restart']}, lost {fig['steps_lost']}; sha256 as uninterrupted"
    )
    assert not wait_no_leaks(gpufleet_home, name)


def test_a_rank_exit_code_without_recover_on_exit_fails_the_run(gpufleet_home, tmp_path):
    """The same failing rank with --recover 1 but no --recover-on-exit: no recovery, the run
    fails as any failing job does (gpufleet exit 1, the rank's own 7 as job_exit_code)."""
    name = "rf"
    wd = workdir_with_script(tmp_path)
    flags = ("--recover", "1", "--recover-mode", "restart")
    with start(gpufleet_home, wd, name, 0.5, *flags, **FAILING) as run:
        rc, err, doc = finish(run, timeout=400)
    assert rc == 1, err[-4000:]
    assert doc["status"] == "failed" and doc["recoveries"] == [], doc
    assert (doc["exit_code"], doc["job_exit_code"]) == (1, FAIL_CODE), doc
    assert "node-1 exited 7 first (rank 1)" in err, err[-3000:]
    assert not re.search(r"^gpufleet: recovery", err, re.M), err[-3000:]
    assert not DONE.search(err)
    assert not wait_no_leaks(gpufleet_home, name)
