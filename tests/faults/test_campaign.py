"""A fault campaign on the sandbox: signals and faults at random moments of a run's life.

Each case starts `gpufleet run` on 2-3 sandbox nodes, waits for a moment (creating nodes,
waiting for SSH, copying, launching, running, tearing down), delivers a signal or a fault,
and asserts the exit code, that nothing is left (no sshd, session, rank or watchdog) and
that `gpufleet list` tells the truth. Bounded for CI; `make faults` (GPUFLEET_FAULTS=N)
runs a longer one. Times are recorded in the printed table, not asserted.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass

import pytest

from tests.faults.sandbox import leaks, signal_node, start_run, wait_no_leaks
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = requires_sshd

COUNT = int(os.environ.get("GPUFLEET_FAULTS", 10))
SEED = int(os.environ.get("GPUFLEET_FAULTS_SEED", time.time()))
# progress line that marks each moment of a run's life
MOMENTS = {
    "creating": r"creating \d+ local nodes",
    "ssh-wait": r"sandbox nodes listening",
    "copying": r"syncing \d+ files",  # the workdir sync's first progress line
    "launching": r"launching none",
    "running": r"launching none",  # + a second
    "teardown": r"tearing down",
}
SIGNALS = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129, "SIGKILL": None}
# A failed rank is exit 1 (its own code, 3, is in the message): gpufleet passes no job code through.
FAULTS = {"rank-fails": 1, "node-killed": 5, "node-hung": 5}


@dataclass
class Case:
    what: str  # a signal name or a fault
    moment: str
    nodes: int


ONLY = [m for m in os.environ.get("GPUFLEET_FAULTS_MOMENTS", "").split(",") if m]


def cases(count: int, seed: int) -> list[Case]:
    """Every signal at every moment once, then the faults; sampled to `count` by seed.
    GPUFLEET_FAULTS_MOMENTS=ssh-wait,creating replays signals at those moments only."""
    rng = random.Random(seed)
    all_cases = [Case(s, m, rng.choice([2, 3])) for s in SIGNALS for m in MOMENTS]
    all_cases += [Case(f, "running", 3) for f in FAULTS]
    if ONLY:
        return [rng.choice([c for c in all_cases if c.moment in ONLY]) for _ in range(count)]
    faults = [c for c in all_cases if c.what in FAULTS]
    rest = [c for c in all_cases if c.what not in FAULTS]
    rng.shuffle(rest)
    hung = [c for c in faults if c.what == "node-hung"]  # slow (liveness deadline): once
    chosen = [c for c in faults if c.what != "node-hung"] + hung
    chosen += rest[: max(0, count - len(chosen))]
    while len(chosen) < count:  # a long campaign: repeat with other random moments
        chosen.append(rng.choice(rest))
    return chosen[:count]


TABLE: list[str] = []


def run_case(home, case: Case, i: int) -> tuple[int | None, float, list[str]]:
    name = f"f{i}"
    job = "sleep 6" if case.moment != "teardown" else "sleep 1"
    if case.what == "rank-fails":
        job = 'if [ "$GPUFLEET_NODE" = node-1 ]; then sleep 1; exit 3; fi; sleep 60'
    elif case.what in ("node-killed", "node-hung"):
        job = "sleep 120"
    with start_run(home, "--name", name, "--nodes", str(case.nodes), "--launcher", "none",
                   "--", job) as run:  # fmt: skip
        assert run.wait_for(MOMENTS[case.moment], timeout=120), "".join(run.lines)
        if case.moment == "running":
            time.sleep(1)
        stopped: list[int] = []
        t0 = time.monotonic()
        if case.what in SIGNALS:
            run.proc.send_signal(getattr(signal, case.what))
        elif case.what == "node-killed":
            signal_node(home, name, "node-1", signal.SIGKILL)
        elif case.what == "node-hung":
            stopped = signal_node(home, name, "node-1", signal.SIGSTOP)
        try:
            rc, ended, out = run.finish(timeout=180)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
    assert "Traceback" not in out, out
    if case.what == "SIGKILL":  # cannot be caught: the cluster is listed, `down` removes it
        listed = gpufleet(home, "list", "--json").stdout
        assert name in listed or case.moment in ("creating", "teardown"), listed
        if name in listed:  # killed before it made anything, or after it removed everything
            assert gpufleet(home, "down", name).returncode == 0
    left = wait_no_leaks(home, name)
    return rc, ended - t0, left


def expected(case: Case) -> set[int]:
    if case.what in FAULTS:
        return {FAULTS[case.what]}
    code = SIGNALS[case.what]
    if code is None:
        return {-9}
    if case.moment == "teardown":
        return {code, 0}  # the teardown may have ended before the signal arrived
    return {code}


@pytest.mark.timeout(3600)
def test_fault_campaign(gpufleet_home):
    chosen = cases(COUNT, SEED)
    TABLE.clear()
    failures = []
    for i, case in enumerate(chosen):
        rc, took, left = run_case(gpufleet_home, case, i)
        ok = rc in expected(case) and not left
        TABLE.append(
            f"{i:3d}  {case.what:12s} {case.moment:10s} nodes={case.nodes}  exit={rc!s:4s} "
            f"{took:5.1f}s  leaks={len(left)}{'' if ok else '  <-- FAIL ' + str(left)}"
        )
        if not ok:
            failures.append(TABLE[-1])
    print(f"\nfault campaign: {len(chosen)} runs, seed {SEED}")
    print("\n".join(TABLE))
    assert not failures, "\n".join(failures)
    assert not leaks(gpufleet_home, "f0")
