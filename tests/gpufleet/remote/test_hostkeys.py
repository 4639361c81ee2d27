"""The node-side commands that replace a bootstrap host key, run for real by dash."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from components.spec import HostKeyRotation
from gpufleet.errors import GpufleetError
from gpufleet.remote import hostkeys

needs_keygen = pytest.mark.skipif(not shutil.which("ssh-keygen"), reason="no ssh-keygen")


def sh(cmd: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", cmd], cwd=cwd, capture_output=True, text=True, check=True)


@needs_keygen
def test_prepare_is_stable_and_commit_swaps_once_then_reloads(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "ssh_host_ed25519_key").write_text("bootstrap private\n")
    (tmp_path / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 BOOT\n")
    rot = HostKeyRotation(
        key_file="../ssh_host_ed25519_key", reload="echo x >> ../reloads", sudo=False
    )
    first = sh(hostkeys.prepare_command(rot), work).stdout
    again = sh(hostkeys.prepare_command(rot), work).stdout
    assert first == again  # a retried prepare shows the same next key
    new = hostkeys.parse_public_key("node-0", first)
    assert new.startswith("ssh-ed25519 ") and "BOOT" not in new

    sh(hostkeys.commit_command(rot), work)
    assert (tmp_path / "ssh_host_ed25519_key.pub").read_text().startswith(new)
    assert "OPENSSH PRIVATE KEY" in (tmp_path / "ssh_host_ed25519_key").read_text()
    assert not list(tmp_path.glob("*.next*"))
    sh(hostkeys.commit_command(rot), work)  # a retried commit changes nothing
    assert (tmp_path / "reloads").read_text() == "x\n"


def test_cloud_nodes_run_both_phases_as_root():
    rot = HostKeyRotation()
    for cmd in (hostkeys.prepare_command(rot), hostkeys.commit_command(rot)):
        assert cmd.startswith("sudo -n sh -c ") and "/etc/ssh/ssh_host_ed25519_key" in cmd
    assert "systemctl reload ssh" in hostkeys.commit_command(rot)


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="no shellcheck")
@pytest.mark.parametrize("sudo", [False, True])
def test_commands_pass_shellcheck(tmp_path, sudo):
    rot = HostKeyRotation(sudo=sudo)
    for cmd in (hostkeys.prepare_command(rot), hostkeys.commit_command(rot)):
        script = tmp_path / "s.sh"
        script.write_text("#!/bin/sh\n" + cmd + "\n")
        out = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout


def test_an_answer_without_a_key_names_the_node_and_the_fix():
    with pytest.raises(GpufleetError) as e:
        hostkeys.parse_public_key("node-3", "sudo: a password is required\n")
    assert "node-3" in str(e.value) and "sudo" in e.value.hint
