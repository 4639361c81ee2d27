"""Recovery on the sandbox (`run` with a RecoverySpec): a 3-node gloo DDP job on CPU
(examples/train_resume.py under torchrun, 1 rank per node) that checkpoints on the head.

Real: sshd nodes on loopback, torchrun, gloo, the kill (SIGKILL of node-1's sshd and every
process of its sessions) and the stop (SIGSTOP/SIGCONT), LocalProvisioner.replace. Driven through
tests/faults/recoverrun.py (run_job in a subprocess) until the CLI has --recover. Times are
printed (the report's figures), never asserted."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.provision.localprocs import _alive, sandbox_processes
from tests.faults.sandbox import Run, node_processes, signal_node, wait_no_leaks
from tests.integration.conftest import ROOT, cli_env, requires_sshd, requires_torch

pytestmark = [requires_sshd, requires_torch]

SEED, STEPS = 7, 14
STEP = re.compile(r"^\[node-0\] step (\d+) t=([\d.]+)$", re.M)
DONE = re.compile(r"^\[node-0\] done steps=(\d+) checksum=\S+ sha256=([0-9a-f]{64})$", re.M)


def start(home: Path, workdir: Path, name: str, sleep: float, recovery: dict | None) -> Run:
    cfg = {
        "name": name,
        "nodes": 3,
        "run_id": f"{name}-run",
        "workdir": str(workdir),
        "command": [
            "train_resume.py",
            "--steps",
            str(STEPS),
            "--seed",
            str(SEED),
            "--sleep-per-step",
            str(sleep),
            "--ckpt-every",
            "2",
        ],  # fmt: skip
        "recovery": recovery,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.faults.recoverrun", json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env(home),
        cwd=ROOT,
        start_new_session=True,
    )
    run = Run(proc, time.monotonic())

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            run.lines.append(line)
            run.q.put(line)
        run.q.put(None)

    import threading

    run._reader = threading.Thread(target=pump, daemon=True)  # type: ignore[attr-defined]
    run._reader.start()  # type: ignore[attr-defined]
    return run


def record(out: str) -> dict:
    found = re.findall(r"^RECORD (.*)$", out, re.M)
    assert found, out[-3000:]
    return json.loads(found[-1])


def workdir_with_script(tmp_path: Path) -> Path:
    wd = tmp_path / "wd"
    wd.mkdir(parents=True)
    shutil.copy(ROOT / "examples" / "train_resume.py", wd / "train_resume.py")
    return wd


def baseline(home: Path, tmp_path: Path) -> str:
    """The uninterrupted run's final parameters (sha256), same seed."""
    with start(home, workdir_with_script(tmp_path / "base"), "rb", 0.0, None) as run:
        rc, _, out = run.finish(timeout=300)
    assert rc == 0, out[-3000:]
    done = DONE.search(out)
    assert done and int(done.group(1)) == STEPS, out[-3000:]
    return done.group(2)


def test_a_killed_node_is_replaced_and_the_job_resumes(gpufleet_home, tmp_path):
    want = baseline(gpufleet_home, tmp_path)
    name = "rk"
    with start(
        gpufleet_home, workdir_with_script(tmp_path), name, 1.5, {"max": 2, "mode": "replace"}
    ) as run:
        assert run.wait_for(r"^\[node-0\] step 5 ", timeout=300), "".join(run.lines)[-3000:]
        old = node_processes(gpufleet_home, name, "node-1")
        assert old
        killed_at = time.time()
        signal_node(gpufleet_home, name, "node-1", signal.SIGKILL)
        rc, _, out = run.finish(timeout=400)
    assert rc == 0, out[-4000:]
    rec = record(out)
    assert rec["status"] == "succeeded" and len(rec["recoveries"]) == 1, rec
    r = rec["recoveries"][0]
    assert (r["attempt"], r["cause"], r["mode"], r["nodes"]) == (1, "lost", "replace", ["node-1"])
    steps = [(int(k), float(t)) for k, t in STEP.findall(out)]
    after = [(k, t) for k, t in steps if t > r["restarted_at"]]
    before = [k for k, t in steps if t < killed_at]
    assert after and after[0][0] > 1, steps  # resumed from a checkpoint, not from step 1
    done = DONE.search(out)
    assert done and int(done.group(1)) == STEPS and done.group(2) == want, out[-3000:]
    assert not [p for p in old if _alive(p)], "a process of the old node-1 is still running"
    assert "no rank of run" in out
    # steps done before the restart (the last may come after the kill) and not in the checkpoint
    lost = max(k for k, t in steps if t < r["restarted_at"]) - (after[0][0] - 1)
    first = after[0][1]
    detect = r["detected_at"] - killed_at
    provision = r["provisioned_at"] - r["detected_at"]
    sync = r["synced_at"] - r["provisioned_at"]
    restart = first - r["synced_at"]
    print(
        f"\nkill -> first step after the restart: {first - killed_at:.1f}s (detect {detect:.1f}s, "
        f"provision {provision:.1f}s, sync {sync:.1f}s, restart {restart:.1f}s); last step "
        f"before the kill {max(before)}, resumed at {after[0][0]}, steps lost {lost}; "
        f"sha256 {done.group(2)[:16]} == uninterrupted"
    )
    assert not wait_no_leaks(gpufleet_home, name)
    assert not sandbox_processes(name, "node-1")


def test_a_slow_node_is_not_replaced(gpufleet_home, tmp_path):
    """SIGSTOP on every process of node-1 for 10 s (below LOST_AFTER_S), then SIGCONT."""
    name = "rs"
    stopped: list[int] = []
    with start(
        gpufleet_home, workdir_with_script(tmp_path), name, 1.0, {"max": 2, "mode": "replace"}
    ) as run:
        try:
            assert run.wait_for(r"^\[node-0\] step 3 ", timeout=300), "".join(run.lines)[-3000:]
            sshd_before = node_processes(gpufleet_home, name, "node-1")
            stopped = signal_node(gpufleet_home, name, "node-1", signal.SIGSTOP)
            time.sleep(10)
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        rc, _, out = run.finish(timeout=300)
    assert rc == 0, out[-4000:]
    rec = record(out)
    print(f"\nslow node: {len(rec['recoveries'])} recoveries, status {rec['status']}")
    assert rec["recoveries"] == [], rec
    assert not re.search(r"^gpufleet: (recovery|node-1: confirming)", out, re.M), out[-3000:]
    times = [float(t) for _, t in STEP.findall(out)]
    stall = max(b - a for a, b in zip(times, times[1:], strict=False))
    print(f"slow node: longest gap between steps {stall:.1f}s (SIGSTOP 10 s), run succeeded")
    assert stall >= 9, times  # the stop did hold the job
    assert set(sshd_before) & set(stopped)
    assert not wait_no_leaks(gpufleet_home, name)


def test_a_preempted_node_is_replaced_with_no_step_lost(gpufleet_home, tmp_path, monkeypatch):
    """A spot notice for node-1 from a fake AWS metadata server (tests/fakes/metadata.py; the
    only fake): node-1's watcher SIGTERMs its rank, gpufleet's watch SIGTERMs every rank, the
    job saves after the current step and exits 143; node-1 is replaced and the job resumes at
    the step it stopped."""
    from tests.fakes.metadata import FakeMetadata

    want = baseline(gpufleet_home, tmp_path)
    name = "rp"
    with FakeMetadata() as fake:
        monkeypatch.setenv("GPUFLEET_SANDBOX_METADATA", f"aws={fake.url()}/{{node}}")
        with start(
            gpufleet_home, workdir_with_script(tmp_path), name, 1.5, {"max": 2, "mode": "replace"}
        ) as run:
            assert run.wait_for(r"^\[node-0\] step 5 ", timeout=300), "".join(run.lines)[-3000:]
            noticed = fake.preempt("node-1")
            assert run.wait_for("preemption notice on node-1", timeout=30)
            fake.state("node-1").preempted_at = None  # the new node-1 is another machine
            rc, _, out = run.finish(timeout=400)
    assert rc == 0, out[-4000:]
    rec = record(out)
    assert rec["status"] == "succeeded" and len(rec["recoveries"]) == 1, rec
    r = rec["recoveries"][0]
    assert (r["cause"], r["mode"], r["nodes"]) == ("preempted", "replace", ["node-1"]), r
    stopped = re.search(r"^\[node-0\] stopped by SIGTERM after step (\d+)", out, re.M)
    resumed = re.search(r"resumed_step=(\d+)", out.split("recovery 1 of")[1])
    assert stopped and resumed and stopped.group(1) == resumed.group(1), out[-3000:]  # none lost
    steps = [(int(k), float(t)) for k, t in STEP.findall(out)]
    first = next((k, t) for k, t in steps if t > r["restarted_at"])
    assert first[0] == int(resumed.group(1)) + 1
    done = DONE.search(out)
    assert done and int(done.group(1)) == STEPS and done.group(2) == want, out[-3000:]
    print(
        f"\npreempted: notice -> first step after the restart {first[1] - noticed:.1f}s "
        f"(detect {r['detected_at'] - noticed:.1f}s, provision "
        f"{r['provisioned_at'] - r['detected_at']:.1f}s, "
        f"sync {r['synced_at'] - r['provisioned_at']:.1f}s, "
        f"restart {first[1] - r['synced_at']:.1f}s); stopped after step {stopped.group(1)}, "
        f"resumed at {first[0]}: 0 steps lost"
    )
    assert not wait_no_leaks(gpufleet_home, name)
