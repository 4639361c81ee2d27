"""kill_group_command with a marker: ranks started in sessions of their own (as torchrun's
agent starts them) are ended with the group. Real processes and shells; nothing faked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid

import pytest

from gpufleet.remote.commands import kill_group_command

SHELLS = [s for s in ("sh", "dash", "bash") if shutil.which(s)]

# The rank ignores TERM (as one stuck in a collective with a vanished peer: its handler never
# runs), so only the KILL after the grace ends it.
RANK = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(600)"
)
AGENT = (
    "import subprocess, sys, time; "
    f"r = subprocess.Popen([sys.executable, '-c', {RANK!r}], start_new_session=True); "
    "print(r.pid, flush=True); time.sleep(600)"
)


def _gone(pid: int, within_s: float = 5.0) -> bool:
    """A SIGKILLed process dies once it is next scheduled: on a loaded machine, a moment later."""
    end = time.monotonic() + within_s
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.05)
    return not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _start(env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    agent = subprocess.Popen(
        [sys.executable, "-c", AGENT], env=env, stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert agent.stdout is not None
    lines = [agent.stdout.readline().strip() for _ in range(2)]
    rank = int(next(x for x in lines if x.isdigit()))
    assert "ready" in lines
    return agent, rank


def _kill(shell: str, pid: int, marker: str | None, **env: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    r = subprocess.run(
        [shell, "-c", kill_group_command(pid, grace_s=1, marker=marker)],
        capture_output=True, text=True, timeout=30, env={**base, **env},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("shell", SHELLS)
def test_a_rank_in_its_own_session_is_killed_with_its_agent(shell):
    marker = f"GPUFLEET_RUN_ID=t-{uuid.uuid4().hex}"
    agent, rank = _start({**os.environ, "GPUFLEET_RUN_ID": marker.split("=", 1)[1]})
    try:
        assert os.getpgid(rank) != agent.pid  # the group kill alone misses it
        _kill(shell, agent.pid, marker)
        assert agent.wait(timeout=5) == -15
        assert _gone(rank), "the rank outlived the kill"
    finally:
        for p in (agent.pid, rank):
            if _alive(p):
                os.kill(p, 9)
        agent.wait()


def test_without_the_marker_the_rank_is_left_and_other_nodes_ranks_are_spared():
    """What the marker fixes (the rank outlives a plain group kill), and on the sandbox a
    rank of the same run on another node (GPUFLEET_NODE differs) is not touched."""
    run_id = f"t-{uuid.uuid4().hex}"
    env = {**os.environ, "GPUFLEET_RUN_ID": run_id, "GPUFLEET_SANDBOX": "c", "GPUFLEET_NODE": "n1"}
    agent, rank = _start(env)
    try:
        _kill("sh", agent.pid, None)
        assert agent.wait(timeout=5) == -15
        assert _alive(rank)
        # the kill runs as node n0's session: n1's rank is not its to end
        _kill(
            "sh", agent.pid, f"GPUFLEET_RUN_ID={run_id}", GPUFLEET_SANDBOX="c", GPUFLEET_NODE="n0"
        )
        assert _alive(rank)
        _kill(
            "sh", agent.pid, f"GPUFLEET_RUN_ID={run_id}", GPUFLEET_SANDBOX="c", GPUFLEET_NODE="n1"
        )
        assert _gone(rank)
    finally:
        for p in (agent.pid, rank):
            if _alive(p):
                os.kill(p, 9)
        agent.wait()
