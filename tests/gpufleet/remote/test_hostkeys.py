"""The node-side commands that replace a bootstrap host key, run for real by dash."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from gpufleet.components.hostkeyrotation import HostKeyRotation
from gpufleet.core.errors import GpufleetError
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


@needs_keygen
def test_cloud_nodes_run_both_phases_through_sudo_and_reload_whichever_sshd_unit(tmp_path):
    """Cloud images log in as an unprivileged user with passwordless sudo (ubuntu, ec2-user,
    azureuser) and sshd's host key is root's: both phases go through `sudo -n` (fails rather
    than prompting). sshd's unit is `ssh` on Debian/Ubuntu, `sshd` on RHEL-likes: the cloud
    default reload works on either. Run with a fake sudo and an RHEL-like fake systemctl."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sudo").write_text(
        '#!/bin/sh\necho "$*" >> "$LOG"\n[ "$1" = -n ] && shift && exec "$@"\nexit 1\n'
    )
    (bindir / "systemctl").write_text(
        '#!/bin/sh\n[ "$2" = sshd ] || exit 5\necho "$*" >> "$RELOADS"\n'
    )
    for f in bindir.iterdir():
        f.chmod(0o755)
    (tmp_path / "ssh_host_ed25519_key").write_text("bootstrap private\n")
    (tmp_path / "ssh_host_ed25519_key.pub").write_text("ssh-ed25519 BOOT\n")
    cloud = HostKeyRotation()
    # sshd's default HostKey for ed25519 (sshd_config(5), HostKey)
    assert cloud.sudo and cloud.key_file == "/etc/ssh/ssh_host_ed25519_key"
    rot = cloud.model_copy(update={"key_file": str(tmp_path / "ssh_host_ed25519_key")})
    env = {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "LOG": str(tmp_path / "sudo.log"),
        "RELOADS": str(tmp_path / "reloads"),
    }

    def run(cmd: str) -> str:
        return subprocess.run(
            ["sh", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
        ).stdout

    new = hostkeys.parse_public_key("node-0", run(hostkeys.prepare_command(rot)))
    run(hostkeys.commit_command(rot))
    assert (tmp_path / "ssh_host_ed25519_key.pub").read_text().startswith(new)
    calls = (tmp_path / "sudo.log").read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("-n sh -c ") for c in calls)
    assert (tmp_path / "reloads").read_text() == "reload sshd\n"


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
