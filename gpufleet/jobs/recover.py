"""Recovery of a run whose node was lost or preempted: the policy (pure) and its node-side steps."""

from __future__ import annotations

import base64
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from gpufleet.components import preempt
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import RecoverySpec
from gpufleet.core.errors import GpufleetError, JobFailed, NodeLost
from gpufleet.core.signals import start_threads
from gpufleet.remote.commands import marked_command

if TYPE_CHECKING:
    from gpufleet.remote import Group

CONFIRM_S = 15.0  # a node is lost only when its provider says so or it refuses this long
CONFIRM_EVERY_S = 3.0
CHECKPOINT_WARN_BYTES = 2 << 30  # a checkpoint this big belongs in a bucket (--checkpoint-dir)
CHECKPOINT_GRACE_S = 90.0  # a preempted job's time to checkpoint, at most
SIGTERM_EXIT = 143  # a rank that saved and exited on SIGTERM (examples/train_resume.py)


@dataclass
class Recovery:
    """One recovery, as the run's record keeps it (RunRecord.recoveries)."""

    attempt: int
    cause: str  # lost | preempted | exit
    reason: str
    mode: str  # replace | relaunch | restart
    nodes: list[str]
    lost_at: float | None = None
    detected_at: float | None = None
    provisioned_at: float | None = None
    synced_at: float | None = None
    restarted_at: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Ending:
    """What ended an attempt, when it is a cause for recovery."""

    cause: str  # lost | preempted | exit
    nodes: list[str]
    reason: str
    lost_at: float | None = None
    notices: dict[str, dict] = field(default_factory=dict)


class LeftoverRanks(GpufleetError):
    """Old ranks still running on a survivor after they were killed, or a survivor that
    did not answer the check (its ranks may run): no restart over them."""

    def __init__(
        self, run_id: str, left: dict[str, list[int]], unanswered: dict[str, str] | None = None
    ):
        where = [f"{n}: pids {' '.join(map(str, p))}" for n, p in sorted(left.items())]
        where += [f"{n}: no answer ({why})" for n, why in sorted((unanswered or {}).items())]
        super().__init__(
            f"run {run_id}: old ranks may still run after the stop ({'; '.join(where)})",
            hint="kill them on those nodes (`gpufleet exec`), then run the job again",
        )
        self.left, self.unanswered = left, dict(unanswered or {})


class RecoveryFailed(NodeLost):
    """A recovery that could not finish (replace failed, old ranks left, no machine to
    make): the run ends as the loss would have without --recover (exit 5), saying why."""

    def __init__(self, end: Ending, attempt: int, error: BaseException):
        GpufleetError.__init__(
            self,
            f"{end.reason}; recovery {attempt} failed: {error}",
            hint=getattr(error, "hint", None)
            or "check `gpufleet status`, then run the job again (it resumes from its checkpoint)",
        )
        self.node = end.nodes[0] if end.nodes else ""
        self.why = f"recovery {attempt} failed: {error}"
        self.error = error


def ending(
    exc: BaseException, notices: dict[str, dict], spec: RecoverySpec, now: float
) -> Ending | None:
    """The cause for a recovery in what ended an attempt, or None (the run ends as today).
    A preemption notice wins over what it caused (a lost node, ranks exiting 143)."""
    if notices:
        nodes = sorted(notices)
        kinds = ", ".join(f"{n}: {notices[n].get('cloud')} {notices[n].get('kind')}" for n in nodes)
        first = min(float(v.get("noticed_at") or now) for v in notices.values())
        return Ending("preempted", nodes, f"preemption notice ({kinds})", first, dict(notices))
    if isinstance(exc, NodeLost):
        reason = "; ".join(f"{n} lost: {w}" for n, w in sorted(exc.whys.items()))
        return Ending("lost", exc.nodes, reason, now)
    if isinstance(exc, JobFailed) and exc.code in spec.on_exit:
        return Ending("exit", [exc.node], f"{exc.node} exited {exc.code} (--recover-on-exit)", now)
    return None


def decide(end: Ending, spec: RecoverySpec, confirmed: bool) -> str:
    """The mode of this recovery: a rank's exit, or a node that answers again, restarts on
    the same nodes; otherwise the spec's mode (replace: the ended nodes; relaunch: all)."""
    if end.cause == "exit" or not confirmed:
        return "restart"
    return spec.mode


def targets(mode: str, end: Ending, all_nodes: list[str]) -> list[str]:
    """The nodes a recovery replaces (replace, relaunch) or restarts on (restart)."""
    if mode == "replace":
        return [n for n in all_nodes if n in end.nodes]
    return list(all_nodes)


def needs_provider(mode: str) -> bool:
    return mode in ("replace", "relaunch")


def confirm_lost(
    node: str,
    provider_status: Callable[[], dict[str, str]] | None,
    answers: Callable[[], bool],
    window_s: float = CONFIRM_S,
    every_s: float = CONFIRM_EVERY_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    others_answer: Callable[[], bool] | None = None,
) -> tuple[bool, str]:
    """Is `node` gone? Its provider saying it is not running settles it; otherwise fresh
    SSH connections are tried over `window_s`: one that succeeds means it is not lost.
    Where the provider says running (or cannot tell), silence alone may be this machine's
    own connection: the loss is confirmed only when another node answers then
    (`others_answer`; none to ask: not confirmed)."""
    if provider_status is not None:
        try:
            st = provider_status().get(node)
        except Exception as e:  # the provider's view unavailable: the probes decide
            st = None
            why_not = f"{type(e).__name__}"
        else:
            why_not = ""
        if st is not None and st != "running":
            return True, f"its provider says {st}"
    else:
        why_not = ""
    tries, end = 0, clock() + window_s
    while True:
        tries += 1
        if answers():
            return False, f"it answered again (try {tries})"
        if clock() >= end:
            extra = f"; provider view unavailable: {why_not}" if why_not else ""
            silent = f"no SSH connection in {tries} tries over {window_s:.0f}s{extra}"
            if others_answer is not None and others_answer():
                return True, f"{silent} while another node answers"
            return False, (
                f"{silent}, and no other node answers either: this machine's connection may "
                "be what failed, so nothing is replaced"
            )
        sleep(every_s)


def leftovers_command(run_id: str, kill: bool, sig: str = "KILL") -> str:
    """PIDs on a node whose environment holds GPUFLEET_RUN_ID=run_id (sent `sig` first, with
    kill); on the sandbox only this node's (GPUFLEET_SANDBOX / GPUFLEET_NODE as the session's)."""
    scan = marked_command(f"GPUFLEET_RUN_ID={run_id}")
    if not kill:
        return scan + "scan; true"
    if sig != "KILL":  # a signal the ranks handle: sent once, nothing waited for
        return scan + f'l=$(scan); [ -n "$l" ] && kill -{sig} $l 2>/dev/null; true'
    return scan + 'l=$(scan); [ -n "$l" ] && kill -KILL $l 2>/dev/null; sleep 0.5; scan; true'


def read_notices(group: Group, timeout: float = 20.0) -> dict[str, dict]:
    """node -> preemption notice, for the group's nodes that have one and answer."""
    out: dict[str, dict] = {}
    for n, r in group.run(preempt.read_command(), check=False, timeout=timeout).items():
        notice = preempt.parse(r.stdout) if r.ok else None
        if notice:
            out[n] = notice
    return out


def fresh(notices: dict[str, dict], handled: set[tuple[str, float]]) -> dict[str, dict]:
    """The notices not handled by an earlier recovery: a node's notice file stays until it
    reboots, so a restart on it would otherwise see the last attempt's notice again."""
    return {n: v for n, v in notices.items() if notice_key(n, v) not in handled}


def notice_key(node: str, notice: dict) -> tuple[str, float]:
    return node, float(notice.get("noticed_at") or 0.0)


class NoticeWatch:
    """While an attempt runs: each node's preemption notice read every `every_s` on a
    connection and a thread of its own (a dead node delays no other's notice); on the
    first, every rank on every node gets SIGTERM (the job checkpoints: all ranks agree to
    stop), and `stop_job` is called if they have not ended by the notice's not_before (at
    most CHECKPOINT_GRACE_S). Notices in `handled` (an earlier attempt's) are ignored."""

    def __init__(
        self,
        info: ClusterInfo,
        run_id: str,
        progress: Callable[[str], None],
        stop_job: Callable[[], None],
        every_s: float = 2.0,
        handled: set[tuple[str, float]] | None = None,
    ):
        self.info, self.run_id, self.progress, self.stop_job = info, run_id, progress, stop_job
        self.every_s, self.handled = every_s, set(handled or ())
        self.notices: dict[str, dict] = {}
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, args=(n.name,), daemon=True) for n in info.nodes
        ]

    def start(self) -> NoticeWatch:
        start_threads(self._threads)
        return self

    def stop(self) -> dict[str, dict]:
        self._done.set()
        for t in self._threads:
            if t.is_alive():
                t.join(30)
        with self._lock:
            return dict(self.notices)

    def _loop(self, node: str) -> None:
        from gpufleet.remote import Group

        with Group(self.info, [node], connect_timeout=5) as g:
            while not self._done.wait(self.every_s):
                try:
                    found = fresh(read_notices(g, timeout=5), self.handled)
                except Exception:
                    continue
                if not found:
                    continue
                with self._lock:
                    first = not self.notices
                    self.notices.update(found)
                if first:
                    with Group(self.info, connect_timeout=5) as every:
                        self._terminate(every, found)
                return

    def _terminate(self, g: Group, found: dict[str, dict]) -> None:
        started = time.time()
        g.run(leftovers_command(self.run_id, kill=True, sig="TERM"), check=False, timeout=20)
        ends = [float(v["not_before"]) for v in found.values() if v.get("not_before")]
        until = min([*ends, started + CHECKPOINT_GRACE_S])
        self.progress(
            f"preemption notice on {', '.join(sorted(found))}: SIGTERM sent to the ranks on "
            f"every node in {time.time() - started:.1f}s; they have until "
            f"{max(until - time.time(), 0):.0f}s from now to checkpoint"
        )
        if not self._done.wait(max(until - time.time(), 0)):
            self.progress("the ranks did not end by the notice's deadline: stopping them")
            self.stop_job()


def parse_pids(text: str) -> list[int]:
    return sorted(int(t) for t in text.split() if t.isdigit())


def pack_command(path: str) -> str:
    """The head's checkpoint folder as base64 of a gzipped tar (empty when there is none);
    a tar that fails fails the command (a partial archive is never sent)."""
    p = shlex.quote(path)
    return (
        f"( [ -d {p} ] || exit 0; t=$(mktemp) || exit 1; "
        f'tar -czf "$t" -C {p} . && base64 < "$t" | tr -d \'\\n\'; rc=$?; rm -f "$t"; exit $rc )'
    )


def unpack_command(path: str) -> str:
    """stdin's archive into `path`, whole or not at all: unpacked next to it, then renamed."""
    p = shlex.quote(path.rstrip("/"))
    return (
        f'( mkdir -p "$(dirname {p})" && t=$(mktemp -d {p}.in.XXXXXX) || exit 1; '
        f'if tar -xzf - -C "$t"; then rm -rf {p} && mv "$t" {p}; '
        f'else rc=$?; rm -rf "$t"; exit $rc; fi )'
    )


def decode(packed: str) -> bytes:
    return base64.b64decode(packed.strip()) if packed.strip() else b""


def summary(r: Recovery) -> str:
    """The recovery's timeline in one progress line: seconds from the loss of each step."""
    base = r.lost_at or r.detected_at or 0.0

    def at(t: float | None) -> str:
        return "-" if t is None else f"{t - base:.1f}s"

    return (
        f"recovery {r.attempt} ({r.cause}, {r.mode} {', '.join(r.nodes)}): detected "
        f"{at(r.detected_at)}, provisioned {at(r.provisioned_at)}, synced {at(r.synced_at)}, "
        f"restarted {at(r.restarted_at)} after the loss"
    )


def spec_for(req_spec: RecoverySpec | None, recorded: RecoverySpec | None) -> RecoverySpec:
    return req_spec or recorded or RecoverySpec()


def check_replaces(name: str, cloud: str, mode: str, nodes: list[str], replaces: bool) -> None:
    """Refuse where the mode needs a new machine and the provider makes none (run_job's check
    before anything starts, and each recovery's)."""
    from gpufleet.core.errors import CannotReplace

    if needs_provider(mode) and not replaces:
        raise CannotReplace(name, cloud, nodes)
