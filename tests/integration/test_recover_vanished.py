"""A node that vanishes without a TCP reset (a VM's QEMU killed) on the sandbox: node-1's sshd
and every process of its sessions SIGSTOPped for good, so its peers' gloo all_reduce waits on
open sockets, as on --cloud vm. `gpufleet run --recover 1` through the real CLI, a 3-node
torchrun job (examples/train_resume.py, 1 rank per node).

Before the fix, fail-fast's group kill missed the ranks (torchrun starts them in sessions of
their own), the orphaned rank held its SSH session's output and the run waited on it for good.
Real: the CLI, sshd on loopback, torchrun, gloo, the SIGSTOP, LocalProvisioner.replace (which
SIGKILLs the stopped processes). Nothing faked."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from gpufleet.provision.localprocs import _alive, sandbox_processes
from tests.faults.sandbox import node_processes, signal_node, wait_no_leaks
from tests.integration.conftest import requires_sshd, requires_torch
from tests.integration.test_recover import (
    DONE,
    STEPS,
    finish,
    start,
    steps_of,
    uninterrupted,  # noqa: F401 (the module's baseline fixture)
    workdir_with_script,
)

pytestmark = [requires_sshd, requires_torch]


def ranks(name: str, node: str) -> list[int]:
    """The node's processes whose environment holds a GPUFLEET_RUN_ID (the ranks, torchrun)."""
    found = []
    for pid in sandbox_processes(name, node):
        with contextlib.suppress(OSError):
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if any(e.startswith(b"GPUFLEET_RUN_ID=") for e in env):
                found.append(pid)
    return found


def test_a_vanished_node_is_replaced_and_its_peers_ranks_are_stopped(
    gpufleet_home,
    tmp_path,
    uninterrupted,  # noqa: F811
):
    name = "rv"
    wd = workdir_with_script(tmp_path)
    frozen: list[int] = []
    try:
        with start(gpufleet_home, wd, name, 1.5, "--recover", "1") as run:
            assert run.wait_for(r"^\[node-0\] step 5 ", timeout=300), "".join(run.lines)[-3000:]
            peers = {n: ranks(name, n) for n in ("node-0", "node-2")}
            assert all(peers.values()), peers
            frozen = signal_node(gpufleet_home, name, "node-1", signal.SIGSTOP)
            frozen_at = time.time()
            rc, err, doc = finish(run, timeout=400)
        assert rc == 0, err[-4000:]
        assert doc["status"] == "succeeded" and len(doc["recoveries"]) == 1, doc
        r = doc["recoveries"][0]
        assert (r["cause"], r["nodes"]) == ("lost", ["node-1"]), r
        # the first attempt's ranks on node-0/node-2 were gone before the restart
        left = {n: [p for p in pids if _alive(p)] for n, pids in peers.items()}
        assert not any(left.values()), left
        assert "no rank of run" in err
        steps = steps_of(err)
        after = [(k, t) for k, t in steps if t > r["restarted_at"]]
        assert after and after[0][0] > 1, steps  # resumed from a checkpoint
        done = DONE.search(err)
        assert done and int(done.group(1)) == STEPS and done.group(2) == uninterrupted
        assert not [p for p in frozen if _alive(p)], "a stopped process of node-1 was left"
        print(
            f"\nvanished node-1: detected {r['detected_at'] - frozen_at:.1f}s after the stop, "
            f"first step after the restart {after[0][1] - frozen_at:.1f}s (step {after[0][0]}); "
            f"sha256 {done.group(2)[:16]} == uninterrupted"
        )
        assert not wait_no_leaks(gpufleet_home, name)
        assert not sandbox_processes(name, "node-1")
        assert not ranks(name, "node-0") and not ranks(name, "node-2")
    finally:
        for pid in frozen:  # on failure: the stopped processes, ended
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in node_processes(gpufleet_home, name, "node-1"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
