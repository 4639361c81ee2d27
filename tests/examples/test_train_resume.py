"""examples/train_resume.py under stock torchrun (no gpufleet): stopped by SIGTERM, resumed from
its checkpoint, it ends with the same parameters as a run that was never stopped.

Nothing is faked: real torchrun (--standalone, 2 ranks, gloo on CPU), a real SIGTERM, the real
checkpoint file. gpufleet's part (GPUFLEET_CHECKPOINT_DIR, GPUFLEET_RESTART_COUNT,
GPUFLEET_RECOVERY_REASON) is set here by hand as gpufleet sets it for every rank.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, requires_torch

SCRIPT = ROOT / "examples" / "train_resume.py"
STEPS, CKPT_EVERY, SLEEP = 30, 7, 0.15
ARGS = ["--steps", str(STEPS), "--ckpt-every", str(CKPT_EVERY), "--seed", "7",
        "--sleep-per-step", str(SLEEP)]  # fmt: skip

pytestmark = requires_torch


class Job:
    """A torchrun of the script in a session of its own, its output collected line by line."""

    def __init__(self, ckpt: Path, **env: str) -> None:
        self.lines: list[str] = []
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        self.proc = subprocess.Popen(
            [*torchrun, "--nproc-per-node", "2", str(SCRIPT), *ARGS],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=dict(os.environ, GPUFLEET_CHECKPOINT_DIR=str(ckpt), OMP_NUM_THREADS="1", **env),
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(re.search(pattern, ln) for ln in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines[-40:]))

    def finish(self, timeout: float = 180) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        self.reader.join(timeout=10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def output(self) -> str:
        return "\n".join(self.lines)

    def steps(self) -> list[int]:
        return [int(m.group(1)) for ln in self.lines if (m := re.match(r"step (\d+) t=\d", ln))]

    def done(self) -> tuple[int, str, str]:
        done = r"^done steps=(\d+) checksum=(\S+) sha256=([0-9a-f]{64})$"
        m = re.search(done, self.output(), re.M)
        assert m, self.output()[-3000:]
        return int(m.group(1)), m.group(2), m.group(3)


def worker_pids(torchrun: int) -> dict[int, int]:
    """{RANK: pid} of torchrun's workers, read from /proc (Linux)."""
    out: dict[int, int] = {}
    for child in Path(f"/proc/{torchrun}/task/{torchrun}/children").read_text().split():
        env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        rank = next(e for e in env if e.startswith(b"RANK=")).split(b"=", 1)[1]
        out[int(rank)] = int(child)
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> tuple[int, str, str]:
    job = Job(tmp_path_factory.mktemp("whole") / "ckpt")
    try:
        rc = job.finish()
    finally:
        job.kill()
    assert rc == 0, job.output()[-3000:]
    assert job.steps() == list(range(1, STEPS + 1))
    return job.done()


@pytest.mark.parametrize("target", ["torchrun", "rank1"])
def test_a_run_stopped_by_sigterm_resumes_and_ends_with_the_same_parameters(
    tmp_path, uninterrupted, target
):
    """torchrun: SIGTERM to torchrun, which forwards it to both ranks (a preemption watcher
    signals every process of the job on its node). rank1: SIGTERM to rank 1 alone, as when only
    another node's ranks are told: rank 0 learns of it through the per-step all-reduce."""
    ckpt = tmp_path / "ckpt"
    first = Job(ckpt)
    try:
        first.wait_for(r"^step 10 t=")
        pid = first.proc.pid if target == "torchrun" else worker_pids(first.proc.pid)[1]
        os.kill(pid, signal.SIGTERM)
        rc = first.finish()
    finally:
        first.kill()
    out = first.output()
    m = re.search(r"^stopped by SIGTERM after step (\d+): checkpoint saved$", out, re.M)
    assert m, out[-3000:]
    stopped = int(m.group(1))
    assert rc != 0  # torchrun reports its workers' exit 143 (or its own signal) as a failure
    assert re.search(r"exitcode\s*:\s*143|got signal: 15", out), out[-3000:]
    assert 10 <= stopped < STEPS
    assert first.steps() == list(range(1, stopped + 1))
    assert (ckpt / "ckpt.pt").exists() and not list(ckpt.glob("*.tmp"))

    second = Job(ckpt, GPUFLEET_RESTART_COUNT="1", GPUFLEET_RECOVERY_REASON="node-1 preempted")
    try:
        rc = second.finish()
    finally:
        second.kill()
    assert rc == 0, second.output()[-3000:]
    start = re.search(
        r"^start world_size=2 .*restart_count=1 recovery_reason='node-1 preempted' "
        r"resumed_step=(\d+) ",
        second.output(),
        re.M,
    )
    assert start, second.output()[-3000:]
    # No step lost, none done twice: the resumed run starts right after the last step printed.
    assert int(start.group(1)) == stopped > 0
    assert second.steps() == list(range(stopped + 1, STEPS + 1))
    assert second.done() == uninterrupted
