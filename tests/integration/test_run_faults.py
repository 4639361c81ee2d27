"""`gpufleet run` against the real world on the sandbox: fail-fast, lost nodes, hang-ups,
the lease, a node image's PATH. Times are printed (see the report), never asserted."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.faults.sandbox import (
    iptables_works,
    leaks,
    node_address,
    partitioned,
    signal_node,
    start_run,
    wait_no_leaks,
)
from tests.integration.conftest import gpufleet, kill_group, requires_sshd

pytestmark = requires_sshd

ON_NODE_1 = 'if [ "$GPUFLEET_NODE" = node-1 ]; then {one}; fi; {rest}'


def job(name: str, nodes: int, command: str, *extra: str) -> list[str]:
    return ["--nodes", str(nodes), "--name", name, "--launcher", "none", *extra, "--", command]


def test_first_failure_stops_every_node(gpufleet_home):
    with start_run(
        gpufleet_home, *job("ff", 3, ON_NODE_1.format(one="sleep 1; exit 3", rest="sleep 120"))
    ) as run:
        assert run.wait_for("launching none")
        t0 = time.monotonic()
        rc, ended, out = run.finish()
    print(f"\nfail-fast: exit {rc} {ended - t0:.1f}s after launch (job on other nodes: 120 s)")
    assert rc == 1, out  # JOB_FAILED; the job's own 3 is in the message
    assert "node-1 exited 3 first" in out
    assert not wait_no_leaks(gpufleet_home, "ff")


def test_no_fail_fast_lets_the_others_finish(gpufleet_home):
    with start_run(
        gpufleet_home,
        *job(
            "nf", 2, ON_NODE_1.format(one="exit 3", rest="sleep 3; echo survived"), "--no-fail-fast"
        ),
    ) as run:
        rc, _, out = run.finish()
    assert rc == 1 and "node-1 exited 3 first" in out, out
    assert "[node-0] survived" in out
    assert not wait_no_leaks(gpufleet_home, "nf")


@pytest.mark.parametrize("how", ["killed", "hung", "partitioned"])
def test_a_lost_node_is_named_and_the_run_ends(gpufleet_home, how):
    if how == "partitioned" and not iptables_works():
        pytest.skip("iptables does not work here (needs root and the iptables tool)")
    name = f"lost-{how[:4]}"
    with start_run(gpufleet_home, *job(name, 3, "sleep 300")) as run:
        assert run.wait_for("launching none")
        time.sleep(1)
        t0 = time.monotonic()
        stopped: list[int] = []
        if how == "killed":
            signal_node(gpufleet_home, name, "node-1", signal.SIGKILL)
            rc, ended, out = run.finish()
        elif how == "hung":
            stopped = signal_node(gpufleet_home, name, "node-1", signal.SIGSTOP)
            try:
                rc, ended, out = run.finish()
            finally:
                signal_node(gpufleet_home, name, "node-1", signal.SIGCONT)
        else:
            with partitioned(*node_address(gpufleet_home, name, "node-1")):
                rc, ended, out = run.finish()
    print(f"\nnode {how}: exit {rc}, named {ended - t0:.1f}s after the fault")
    assert rc == 5, out
    assert "node-1 lost:" in out and "Traceback" not in out
    if how != "killed":
        assert "no answer for" in out
    assert not wait_no_leaks(gpufleet_home, name), stopped


def test_sighup_tears_down_like_sigterm(gpufleet_home):
    with start_run(gpufleet_home, *job("hup", 2, "sleep 300")) as run:
        assert run.wait_for("launching none")
        t0 = time.monotonic()
        run.proc.send_signal(signal.SIGHUP)
        rc, ended, out = run.finish()
    print(f"\nSIGHUP: exit {rc} in {ended - t0:.1f}s, left: {leaks(gpufleet_home, 'hup')}")
    assert rc == 129, out
    assert "interrupted by SIGHUP" in out
    assert not wait_no_leaks(gpufleet_home, "hup")


def test_closing_the_terminal_tears_down_and_exits_129(gpufleet_home):
    """The real hang-up: run's controlling terminal goes away (the kernel sends SIGHUP and
    every later write to it fails), yet the teardown completes."""
    import fcntl
    import os
    import pty
    import sys
    import termios

    from tests.integration.conftest import ROOT, cli_env

    master, slave = pty.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "run", *job("tty", 2, "sleep 300")],
        stdin=slave, stdout=slave, stderr=slave, env=cli_env(gpufleet_home), cwd=ROOT,
        preexec_fn=own_terminal,
    )  # fmt: skip
    os.close(slave)
    try:
        seen = b""
        deadline = time.monotonic() + 120
        while b"launching none" not in seen and time.monotonic() < deadline:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        assert b"launching none" in seen, seen
        t0 = time.monotonic()
        os.close(master)  # the terminal window closes
        master = -1
        rc = proc.wait(timeout=120)
    finally:  # a failed wait: its session goes (the home's teardown removes the cluster)
        if master >= 0:
            os.close(master)
        kill_group(proc)
    print(f"\nterminal closed: exit {rc} in {time.monotonic() - t0:.1f}s")
    assert rc == 129
    assert not wait_no_leaks(gpufleet_home, "tty")


def test_kill_9_of_run_the_lease_removes_the_nodes(gpufleet_home):
    """Shared design: nodes remove themselves at min(expiry, lease) once nobody renews."""
    lease_s = 15
    with start_run(
        gpufleet_home,
        *job("lease", 2, "sleep 300"),
        env={"GPUFLEET_LEASE_S": str(lease_s), "GPUFLEET_LEASE_RENEW_S": "3"},
    ) as run:
        assert run.wait_for("launching none")
        time.sleep(4)  # at least one renewal after the first lease
        run.proc.kill()
        t0 = time.monotonic()
        run.finish()
    assert leaks(gpufleet_home, "lease")  # SIGKILL cannot be caught: the cluster is still up
    left = wait_no_leaks(gpufleet_home, "lease", timeout=lease_s + 60)
    print(f"\nkill -9 of run: nodes gone {time.monotonic() - t0:.0f}s later (lease {lease_s}s)")
    assert not left


def test_an_expired_lease_is_reported_as_expiry_not_exit_minus_1(gpufleet_home):
    with start_run(
        gpufleet_home,
        *job("exp", 2, "sleep 300"),
        env={"GPUFLEET_LEASE_S": "6", "GPUFLEET_LEASE_RENEW_S": "3600"},
    ) as run:
        rc, _, out = run.finish()
    assert rc == 6, out
    assert "reached its expiry at" in out and "exited -1" not in out
    assert not wait_no_leaks(gpufleet_home, "exp")


def test_a_sandbox_node_has_the_environment_s_python_pip_and_torchrun(gpufleet_home):
    import sys
    from pathlib import Path

    bindir = str(Path(sys.executable).parent)
    job_cmd = "command -v python; command -v pip; python -c 'import sys; print(sys.prefix)'"
    setup = "command -v torchrun; command -v pip"
    r = gpufleet(gpufleet_home, "run", *job("path", 1, job_cmd, "--setup", setup))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"[node-0] {bindir}/python" in r.stdout
    if Path(bindir, "pip").exists():  # some environments have `python -m pip` only
        assert f"[node-0] {bindir}/pip" in r.stdout
    assert f"[node-0] {bindir}/torchrun" in r.stdout
    assert f"[node-0] {sys.prefix}" in r.stdout


def test_refused_connection_on_an_existing_cluster_fails_at_once(gpufleet_home):
    assert gpufleet(gpufleet_home, "up", "--name", "ref", "--nodes", "2").returncode == 0
    try:
        signal_node(gpufleet_home, "ref", "node-1", signal.SIGKILL)
        t0 = time.monotonic()
        r = gpufleet(gpufleet_home, "run", "--cluster", "ref", "--launcher", "none", "--", "true")
        print(f"\nrefused: exit {r.returncode} in {time.monotonic() - t0:.1f}s")
        assert r.returncode == 4, r.stderr
        assert "node-1 of cluster 'ref' refused" in r.stderr and "fix:" in r.stderr
        assert "Traceback" not in r.stderr
    finally:
        assert gpufleet(gpufleet_home, "down", "ref").returncode == 0
    assert not wait_no_leaks(gpufleet_home, "ref")


def test_ctrl_c_while_waiting_for_ssh_takes_effect_at_once(gpufleet_home):
    """A node that accepts TCP but sends no banner, as a booting cloud node can."""
    assert gpufleet(gpufleet_home, "up", "--name", "slow", "--nodes", "2").returncode == 0
    stopped = signal_node(gpufleet_home, "slow", "node-1", signal.SIGSTOP)
    try:
        with start_run(
            gpufleet_home, "--cluster", "slow", "--launcher", "none", "--", "true"
        ) as run:
            time.sleep(4)
            t0 = time.monotonic()
            run.proc.send_signal(signal.SIGINT)
            rc, ended, out = run.finish(timeout=60)
        print(f"\nSIGINT while waiting for SSH: exit {rc} in {ended - t0:.1f}s")
        assert rc == 130, out
        assert "Traceback" not in out and "Error reading SSH protocol banner" not in out
    finally:
        for pid in stopped:
            subprocess.run(["kill", "-CONT", str(pid)], capture_output=True)
        assert gpufleet(gpufleet_home, "down", "slow").returncode == 0
