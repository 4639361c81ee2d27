"""`gpufleet run` end to end on a real 2-node sandbox: training, failure, signals, reuse."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.integration.conftest import (
    ROOT,
    cli_env,
    gpufleet,
    leftovers,
    requires_sshd,
    requires_torch,
    sshd_of,
)

pytestmark = requires_sshd
EXAMPLES = str(ROOT / "examples")


def run_args(name: str, *train_args: str) -> list[str]:
    return ["run", "--nodes", "2", "--name", name, "--workdir", EXAMPLES, "--", "train_ddp.py",
            *train_args]  # fmt: skip


def assert_nothing_left(home, name: str) -> None:
    assert json.loads(gpufleet(home, "list", "--json").stdout)["clusters"] == []
    assert not sshd_of(home, name)
    assert not leftovers(name)


@requires_torch
def test_two_node_training_streams_both_nodes_and_tears_down(gpufleet_home):
    r = gpufleet(gpufleet_home, *run_args("job", "--steps", "40"), timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout.splitlines()
    assert any(ln.startswith("[node-0] rank 0/2 up") for ln in out)
    assert any(ln.startswith("[node-1] rank 1/2 up") for ln in out)
    losses = [float(m.group(1)) for ln in out if (m := re.search(r"step +\d+ loss ([\d.]+)", ln))]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert any("[node-1] rank 1: parameters match rank 0" in ln for ln in out)
    done = [ln for ln in out if ln.startswith("[node-0] done ")]
    assert done and "world_size=2" in done[0]
    assert_nothing_left(gpufleet_home, "job")


@requires_torch
def test_failing_rank_sets_exit_code_and_names_the_node(gpufleet_home):
    r = gpufleet(
        gpufleet_home, *run_args("fail", "--fail-on-rank", "1", "--fail-code", "3"), timeout=240
    )
    assert r.returncode == 1, r.stdout + r.stderr  # never the job's 3: that reads as a host key
    assert "node-1 exited 3 first (rank 1)" in r.stderr
    assert_nothing_left(gpufleet_home, "fail")


def _lines(proc: subprocess.Popen) -> queue.Queue:
    q: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def _wait_for(q: queue.Queue, pattern: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = q.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if re.search(pattern, line):
            return line
    raise AssertionError(f"no line matching {pattern!r}; got:\n{''.join(seen)}")


@requires_torch
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_stops_ranks_and_removes_the_cluster(gpufleet_home, sig, code):
    name = f"sig{code}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", *run_args(name, "--steps", "100000",
                                                      "--sleep-per-step", "0.05")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(gpufleet_home),
        cwd=ROOT,
    )  # fmt: skip
    try:
        lines = _lines(proc)
        _wait_for(lines, r"\[node-0\] step +\d+ loss", timeout=180)
        assert leftovers(name), "training should be running on the sandbox"
        sent = time.monotonic()
        proc.send_signal(sig)
        rc = proc.wait(timeout=30)
        elapsed = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == code
    assert elapsed < 10, f"took {elapsed:.1f}s to stop"
    assert_nothing_left(gpufleet_home, name)


def test_launcher_none_gets_the_rank_env_and_hostfile(gpufleet_home, tmp_path):
    (tmp_path / "probe.sh").write_text(
        'echo "rank=$GPUFLEET_NODE_RANK of $GPUFLEET_NUM_NODES master=$MASTER_ADDR"\n'
        'cat "$GPUFLEET_HOSTFILE"\n'
    )
    r = gpufleet(
        gpufleet_home, "run", "--nodes", "2", "--name", "plain", "--workdir", str(tmp_path),
        "--launcher", "none", "--", "sh", "probe.sh",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    for i in range(2):
        assert any(ln.startswith(f"[node-{i}] rank={i} of 2 master=127.") for ln in out)
        assert any(ln.startswith(f"[node-{i}] ") and "slots=1" in ln for ln in out)
    assert_nothing_left(gpufleet_home, "plain")


def test_reused_cluster_is_kept_and_setup_runs_everywhere(make_sandbox, gpufleet_home, tmp_path):
    make_sandbox("keep", 2)
    (tmp_path / "hello.txt").write_text("hi\n")
    r = gpufleet(
        gpufleet_home, "run", "--cluster", "keep", "--workdir", str(tmp_path),
        "--setup", "echo setup-on-$GPUFLEET_NODE", "--launcher", "none", "--", "cat", "hello.txt",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for i in range(2):
        assert f"[node-{i}] setup-on-node-{i}" in r.stdout
        assert f"[node-{i}] hi" in r.stdout
    listed = json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"]
    assert [c["name"] for c in listed] == ["keep"]
