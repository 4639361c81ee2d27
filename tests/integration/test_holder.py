"""Warm and tree exec on a real sandbox: a warm exec opens no SSH connection, keeps exit
codes, timeouts and Ctrl-C, and its holder goes away with `down`; a tree exec reaches
every node through the head, by default from GPUFLEET_TREE_FROM nodes on when set, the lease
too."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufleet.core import state
from gpufleet.provision.localprocs import folder_processes
from gpufleet.remote import holder
from tests.integration.conftest import ROOT, cli_env, gpufleet, leftovers, requires_sshd

pytestmark = requires_sshd


def _accepted(info) -> int:
    """SSH connections the sandbox nodes accepted so far (sshd logs one line each)."""
    logs = (Path(n.workdir).parent / "sshd.log" for n in info.nodes)
    return sum(p.read_text().count("Accepted publickey") for p in logs)


def _wait_for_holder(name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = holder._connect(name)
        if s is not None:
            s.close()
            return
        time.sleep(0.1)
    raise AssertionError("the holder never started listening")


def test_warm_exec_reuses_connections_and_keeps_exit_codes(make_sandbox, gpufleet_home):
    info = make_sandbox("t", 3)
    cold = gpufleet(gpufleet_home, "exec", "t", "--", "true")
    assert cold.returncode == 0, cold.stderr
    _wait_for_holder("t")
    before = _accepted(info)
    warm = gpufleet(gpufleet_home, "exec", "t", "--", "echo", "hi from $GPUFLEET_NODE")
    assert warm.returncode == 0, warm.stderr
    assert sorted(warm.stdout.splitlines()) == [f"[node-{i}] hi from node-{i}" for i in range(3)]
    assert _accepted(info) == before  # through the holder's transports, no new handshake

    failed = gpufleet(
        gpufleet_home, "exec", "t", "--", '[ "$GPUFLEET_NODE" = node-1 ] && exit 7; true'
    )
    assert failed.returncode == 1 and "node-1: exit 7" in failed.stderr
    only = gpufleet(gpufleet_home, "exec", "t", "--node", "node-2", "--json", "--", "echo", "x")
    doc = json.loads(only.stdout)
    assert {n["name"]: n["stdout"] for n in doc["nodes"]} == {"node-2": "x\n"}
    # the holder's refusal keeps the exit code and fix a cold exec gives (it exited 8, fixless)
    unknown = gpufleet(gpufleet_home, "exec", "t", "--node", "node-9", "--", "true")
    assert unknown.returncode == 2, unknown.stderr
    assert "has no node 'node-9'" in unknown.stderr and "fix: nodes are node-0" in unknown.stderr
    slow = gpufleet(gpufleet_home, "exec", "t", "--timeout", "1", "--", "sleep", "30")
    assert slow.returncode != 0 and "timed out" in slow.stderr
    assert _accepted(info) == before


@pytest.mark.parametrize("mode", ["warm", "tree"])
def test_ctrl_c_on_a_warm_exec_stops_the_remote_command(make_sandbox, gpufleet_home, mode):
    make_sandbox("t", 2)
    flags = ["--tree"] if mode == "tree" else []
    gpufleet(gpufleet_home, "exec", "t", *flags, "--", "true")
    if mode == "warm":
        _wait_for_holder("t")
    p = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "exec", "t", *flags, "--", "echo started; sleep 60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(gpufleet_home),
        cwd=ROOT,
    )
    try:
        assert p.stdout is not None
        seen = [p.stdout.readline(), p.stdout.readline()]
        assert all("started" in line for line in seen)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=30)
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _sleeps("t"):
        time.sleep(0.1)
    assert not _sleeps("t")


def _sleeps(name: str) -> list[int]:
    out = []
    for pid in leftovers(name):
        try:
            if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                out.append(pid)
        except OSError:
            pass  # it exited between the listing and the read
    return out


def test_down_stops_the_holder(gpufleet_home):
    up = gpufleet(gpufleet_home, "up", "--nodes", "2", "--name", "h")
    assert up.returncode == 0, up.stderr
    try:
        gpufleet(gpufleet_home, "exec", "h", "--", "true")
        _wait_for_holder("h")
        pid = int((state.cluster_dir("h") / "holder.pid").read_text())
        assert pid in folder_processes(state.cluster_dir("h"))  # cleanup by folder finds it
    finally:
        down = gpufleet(gpufleet_home, "down", "h")
    assert down.returncode == 0, down.stderr
    assert (
        not Path(f"/proc/{pid}").exists()
        or b"holder" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    assert not holder.socket_path("h").exists()


def test_tree_exec_runs_everywhere_through_the_head(make_sandbox, gpufleet_home, monkeypatch):
    info = make_sandbox("t", 4)
    r = gpufleet(
        gpufleet_home,
        "exec",
        "t",
        "--tree",
        "--",
        'echo "on $GPUFLEET_NODE"; [ "$GPUFLEET_NODE" = node-2 ] && exit 5; true',
    )
    assert r.returncode == 1 and "node-2: exit 5" in r.stderr
    assert sorted(r.stdout.splitlines()) == [f"[node-{i}] on node-{i}" for i in range(4)]
    before = _accepted(info)
    one = gpufleet(gpufleet_home, "exec", "t", "--tree", "--node", "node-3", "--", "pwd")
    assert one.returncode == 0 and one.stdout == f"[node-3] {info.nodes[3].workdir}\n"
    # This machine kept its one connection to the head; the head kept its own to node-3.
    assert _accepted(info) == before
    # From GPUFLEET_TREE_FROM nodes on the tree is the default, over the kept connections;
    # --no-tree and --timeout reach every node from here; --json keeps its shape either way.
    monkeypatch.setenv("GPUFLEET_TREE_FROM", "4")
    by_default = gpufleet(gpufleet_home, "exec", "t", "--json", "--", "true")
    assert by_default.returncode == 0 and _accepted(info) == before
    direct = gpufleet(gpufleet_home, "exec", "t", "--timeout", "60", "--json", "--", "true")
    assert direct.returncode == 0 and _accepted(info) > before
    rows = [json.loads(p.stdout)["nodes"] for p in (by_default, direct)]
    assert [sorted(r) for r in rows[0]] == [sorted(r) for r in rows[1]]
    assert [r["name"] for r in rows[0]] == [f"node-{i}" for i in range(4)]
    # The lease too: one command on the head writes every node's.
    from gpufleet.remote import Group

    before = _accepted(info)
    with Group(state.load("t")) as g:
        assert g.write_lease(600) == {f"node-{i}": None for i in range(4)}
    assert _accepted(info) == before  # no connection from here to any node
    for n in info.nodes:
        left = int((Path(n.workdir).parent / "lease").read_text()) - time.time()
        assert 590 < left <= 601
