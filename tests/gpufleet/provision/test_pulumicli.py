"""`gpufleet setup pulumi`: the pinned CLI under $GPUFLEET_HOME, tested with a fake installer."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.core.errors import GpufleetError
from gpufleet.provision import pulumicli


def fake_installer(reports: str | None = None):
    """Writes what PulumiCommand.install leaves: <root>/bin/pulumi, here a script."""
    calls = []

    def install(root: Path, version: str) -> None:
        calls.append((root, version))
        binary = root / "bin" / "pulumi"
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text(f"#!/bin/sh\necho v{reports or version}\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)

    install.calls = calls
    return install


def test_installs_the_pinned_version_once_under_gpufleet_home(gpufleet_home):
    inst = fake_installer()
    path = pulumicli.install(lambda _m: None, installer=inst)
    assert path == str(gpufleet_home / "pulumi-cli" / pulumicli.PINNED / "bin" / "pulumi")
    assert inst.calls == [(gpufleet_home / "pulumi-cli" / pulumicli.PINNED, pulumicli.PINNED)]
    assert pulumicli.install(lambda _m: None, installer=inst) == path
    assert len(inst.calls) == 1  # already there: not installed again


def test_pinned_matches_the_sdk_it_drives():
    """PulumiCommand.install's own default is "the version matching the SDK version" (its
    docstring, pulumi/automation/_cmd.py): the pin follows the SDK gpufleet is tested with."""
    from importlib.metadata import version

    assert version("pulumi") == pulumicli.PINNED


def test_a_cli_reporting_another_version_is_refused(gpufleet_home):
    with pytest.raises(GpufleetError, match="reports version 3.0.0"):
        pulumicli.install(lambda _m: None, installer=fake_installer("3.0.0"))


def test_installer_failure_says_how_to_install_by_hand(gpufleet_home):
    def offline(root: Path, version: str) -> None:
        raise OSError("network unreachable")

    with pytest.raises(GpufleetError, match="network unreachable") as e:
        pulumicli.install(lambda _m: None, installer=offline)
    assert "get.pulumi.com" in e.value.hint


def test_cloud_commands_use_the_installed_cli(gpufleet_home, monkeypatch):
    from gpufleet.provision.pulumi import find_pulumi

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    pulumicli.install(lambda _m: None, installer=fake_installer())
    found = find_pulumi()
    assert found == pulumicli.installed()
    import os

    assert os.environ["PATH"].split(os.pathsep)[0] == str(Path(found).parent)


def test_setup_pulumi_command_help_names_the_pin():
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "setup", "pulumi", "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0 and pulumicli.PINNED in r.stdout and "GPUFLEET_HOME" in r.stdout
