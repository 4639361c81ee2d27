"""Before money is spent: the plan summary and Y/n on a terminal, none in CI, --yes installs."""

from __future__ import annotations

import os
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.components.exitcodes import ExitCode

ROOT = Path(__file__).resolve().parents[3]
UP_AWS = [
    "up",
    "--cloud",
    "aws",
    "-t",
    "p4d.24xlarge",
    "--name",
    "t",
    "--ssh-cidr",
    "203.0.113.0/24",
]


def no_pulumi_env(tmp_path: Path, home: Path) -> dict[str, str]:
    bindir = Path(sys.executable).parent
    return {**os.environ, "PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp_path),
            "GPUFLEET_HOME": str(home)}  # fmt: skip


def test_terminal_shows_the_plan_and_no_creates_nothing(tmp_path, gpufleet_home):
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", *UP_AWS],
        stdin=follower, stdout=follower, stderr=follower, cwd=ROOT,
        env=no_pulumi_env(tmp_path, gpufleet_home),
    )  # fmt: skip
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    while b"[Y/n]" not in seen and time.monotonic() < deadline:
        if select.select([leader], [], [], 1)[0]:
            seen += os.read(leader, 4096)
    os.write(leader, b"n\n")
    assert proc.wait(timeout=60) == ExitCode.DECLINED
    try:
        while select.select([leader], [], [], 0.5)[0]:
            seen += os.read(leader, 4096)
    except OSError:
        pass  # the terminal closed with the process
    os.close(leader)
    text = seen.decode()
    assert "2 x p4d.24xlarge, 16 GPUs, in aws us-east-1" in text
    assert "at TTL" in text and "Create it? [Y/n]" in text
    assert "not confirmed: nothing was created" in text
    assert list(gpufleet_home.iterdir()) == []


def test_no_question_when_stdin_is_not_a_terminal(tmp_path, gpufleet_home):
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", *UP_AWS],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=ROOT, timeout=60,
        env=no_pulumi_env(tmp_path, gpufleet_home),
    )  # fmt: skip
    assert "[Y/n]" not in r.stderr
    assert r.returncode == 2 and "pulumi is not installed" in r.stderr


def test_yes_installs_the_pinned_pulumi_on_first_cloud_use(tmp_path, gpufleet_home, monkeypatch):
    from gpufleet.cli import spend
    from gpufleet.provision import pulumicli

    def fake(root: Path, version: str) -> None:
        binary = root / "bin" / "pulumi"
        binary.parent.mkdir(parents=True)
        binary.write_text(f"#!/bin/sh\necho v{version}\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(pulumicli, "automation_install", fake)
    spend.ensure_pulumi(yes=True)
    assert pulumicli.installed() is not None
