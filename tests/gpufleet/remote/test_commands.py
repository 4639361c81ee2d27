"""The shell a node runs: the wrapped command (PID line, tied session), the kill command, tar."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from gpufleet.components.clusterinfo import NodeInfo
from gpufleet.remote.commands import PID_MARK, kill_group_command, tar_files, wrap_command

SHELLS = [s for s in ("sh", "dash", "bash") if shutil.which(s)]


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapped_command_prints_pid_then_runs_in_workdir(tmp_path, shell):
    node = NodeInfo(name="node-0", private_ip="a", public_ip="a", workdir=str(tmp_path / "w d"))
    out = subprocess.run(
        [shell, "-c", wrap_command(node, "pwd; echo $((1+1))")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0].startswith(PID_MARK + " ") and out[0].split()[1].isdigit()
    assert out[1:] == [str(tmp_path / "w d"), "2"]


@pytest.mark.parametrize("shell", SHELLS)
def test_kill_command_is_valid_and_kills_a_group(shell):
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        r = subprocess.run(
            [shell, "-c", kill_group_command(victim.pid, grace_s=2)],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert r.returncode == 0, r.stderr
        assert victim.wait(timeout=5) == -15
    finally:
        victim.kill()
        victim.wait()


def test_tar_files_roundtrip():
    data = tar_files({"a/b.txt": "x", "run.py": b"print()"})
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("a/b.txt").read() == b"x"
        assert tar.getmember("run.py").mode == 0o755


@pytest.mark.parametrize("shell", SHELLS)
def test_a_tied_command_keeps_its_output_and_exit_code(tmp_path, shell):
    node = NodeInfo(name="node-0", private_ip="a", public_ip="a", workdir=str(tmp_path / "w"))
    r = subprocess.run(
        [shell, "-c", wrap_command(node, "pwd; echo err >&2; exit 3 # a comment", tied=True)],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 3 and r.stderr == "err\n"
    assert r.stdout.splitlines()[1:] == [str(tmp_path / "w")]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="the watcher reads /proc")
def test_a_tied_command_ends_with_its_session(tmp_path):
    """sshd leaves a session's processes running when the client's connection drops (no pty,
    no SIGHUP; seen on the sandbox's OpenSSH after kill -9 of the client): their shell is only
    re-parented. Here the session's sshd is a parent process killed with SIGKILL."""
    import time

    node = NodeInfo(name="node-0", private_ip="a", public_ip="a", workdir=str(tmp_path))
    session = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen(['sh', '-c', sys.argv[1]], start_new_session=True, "
        "stdout=subprocess.DEVNULL); print(p.pid, flush=True); time.sleep(60)"
    )
    wrapped = wrap_command(node, "sleep 60 & sleep 60; wait", tied=True)
    parent = subprocess.Popen(
        [sys.executable, "-c", session, wrapped], stdout=subprocess.PIPE, text=True
    )
    pgid = int(parent.stdout.readline())
    try:
        time.sleep(1.5)  # the watcher has read its parent
        assert os.killpg(pgid, 0) is None  # the command runs while its session lives
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20  # a second's poll, then TERM
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
    finally:
        parent.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, 9)
