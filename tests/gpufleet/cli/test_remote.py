"""`gpufleet ssh`: OpenSSH is run with the cluster's own ssh config, which it leaves as is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpufleet.clusters import ops
from gpufleet.core import state
from gpufleet.remote import sshconfig
from tests.gpufleet.fakes import cluster

ROOT = Path(__file__).resolve().parents[3]


def ssh(home: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """`gpufleet ssh` with a stand-in `ssh` first on PATH that prints its arguments."""
    fake = bin_dir / "ssh"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    env = {**os.environ, "GPUFLEET_HOME": str(home), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "ssh", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip


def test_ssh_keeps_the_control_persist_that_ssh_config_added(gpufleet_home, tmp_path):
    info = cluster()
    state.save(info)
    cfg = ops.write_ssh_config(info, control_persist="10m")
    r = ssh(gpufleet_home, tmp_path, "t", "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["-F", str(cfg), "t-node-1"]
    assert "ControlPersist 10m" in cfg.read_text()


def test_ssh_writes_the_config_when_it_is_missing(gpufleet_home, tmp_path):
    info = cluster()
    state.save(info)
    cfg = state.cluster_dir("t") / sshconfig.FILE
    assert not cfg.exists()
    r = ssh(gpufleet_home, tmp_path, "t")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["-F", str(cfg), "t-node-0"]
    assert cfg.read_text() == sshconfig.render(info)
