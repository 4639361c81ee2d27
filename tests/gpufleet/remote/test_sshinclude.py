"""`ssh-config --install`: the Include goes first in ~/.ssh/config, where OpenSSH reads it."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.clusters import ops
from gpufleet.core import state
from gpufleet.remote import sshconfig, sshinclude
from tests.gpufleet.fakes import cluster

ROOT = Path(__file__).resolve().parents[3]
USER_CONFIG = """# my hosts
Host github.com
    User git
    IdentityFile ~/.ssh/github

Match host *.corp exec "true"
    User me
"""
needs_ssh = pytest.mark.skipif(not shutil.which("ssh"), reason="OpenSSH client not installed")


def gpufleet(home: Path, gf_home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "GPUFLEET_HOME": str(gf_home)}
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "ssh-config", *args],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip


def resolve(config: Path, host: str) -> dict[str, str]:
    """What OpenSSH would use for `host` (ssh -G prints it without connecting)."""
    out = subprocess.run(
        ["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def first_setting(text: str) -> str:
    return next(ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


@pytest.fixture
def recorded(gpufleet_home):
    """Cluster `t` as `up` leaves it: its record and its ssh config in its folder."""
    info = cluster()
    info.nodes[1] = info.nodes[1].model_copy(update={"ssh_port": 40022})  # not OpenSSH's default
    state.save(info)
    ops.write_ssh_config(info)
    return info


@needs_ssh
def test_install_goes_first_keeps_the_rest_and_openssh_finds_the_nodes(
    tmp_path, gpufleet_home, recorded
):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    config = home / ".ssh" / "config"
    config.write_text(USER_CONFIG)
    config.chmod(0o644)
    line = sshconfig.include_line(gpufleet_home)

    r = gpufleet(home, gpufleet_home, "--install")
    assert r.returncode == 0, r.stderr
    assert f"added `{line}` at the top of {config}" in r.stderr
    text = config.read_text()
    assert first_setting(text) == line
    assert text.endswith("\n\n" + USER_CONFIG)  # the user's file, byte for byte, below it
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
    got = resolve(config, "t-node-1")
    assert (got["hostname"], got["port"]) == ("203.0.113.1", "40022")
    assert got["user"] == "ubuntu" and got["identityfile"] == "/k/id"
    assert resolve(config, "github.com")["user"] == "git"  # the user's hosts still work

    again = gpufleet(home, gpufleet_home, "--install")
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert config.read_text() == text
    assert sorted(p.name for p in config.parent.iterdir()) == ["config"]  # no temp file left


@needs_ssh
def test_the_line_appended_after_a_host_block_does_not_work_and_install_moves_it(
    tmp_path, gpufleet_home, recorded
):
    """The old advice, `ssh-config --include >> ~/.ssh/config`: below `Host`/`Match`, an
    Include is read only for hosts that block matches, so t-node-1 stays unresolved."""
    config = tmp_path / ".ssh" / "config"
    config.parent.mkdir()
    line = sshconfig.include_line(gpufleet_home)
    config.write_text(USER_CONFIG + line + "\n")
    unseen = resolve(config, "t-node-1")
    assert (unseen["hostname"], unseen["port"]) == ("t-node-1", "22")  # OpenSSH's defaults

    r = gpufleet(tmp_path, gpufleet_home, "--install")
    assert r.returncode == 0 and "moved" in r.stderr
    text = config.read_text()
    assert text.count(line) == 1 and first_setting(text) == line
    assert text.endswith("\n\n" + USER_CONFIG)
    seen = resolve(config, "t-node-1")
    assert (seen["hostname"], seen["port"]) == ("203.0.113.1", "40022")


def test_install_creates_ssh_0700_and_the_config_0600(tmp_path, gpufleet_home):
    r = gpufleet(tmp_path, gpufleet_home, "--install")
    assert r.returncode == 0, r.stderr
    config = tmp_path / ".ssh" / "config"
    assert "created" in r.stderr
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert first_setting(config.read_text()) == sshconfig.include_line(gpufleet_home)


def test_uninstall_gives_back_the_file_as_it_was(tmp_path, gpufleet_home):
    config = tmp_path / ".ssh" / "config"
    config.parent.mkdir()
    config.write_text(USER_CONFIG)
    assert gpufleet(tmp_path, gpufleet_home, "--install").returncode == 0
    r = gpufleet(tmp_path, gpufleet_home, "--uninstall")
    assert r.returncode == 0 and "removed" in r.stderr
    assert config.read_text() == USER_CONFIG
    assert "nothing to do" in gpufleet(tmp_path, gpufleet_home, "--uninstall").stderr


def test_a_global_option_above_it_is_not_first_so_it_goes_above(gpufleet_home):
    """OpenSSH keeps the first value it reads: a global `User bob` above the Include would
    win over every cluster's own User."""
    line = sshconfig.include_line(gpufleet_home)
    text = f"User bob\n{line}\n"
    assert not sshinclude.placed(text, line)
    assert sshinclude.with_include(text, line) == f"{sshinclude.MARK}\n{line}\n\nUser bob\n"


def test_below_other_tools_includes_it_counts_as_first(gpufleet_home):
    """SkyPilot, OrbStack, Colima... put their own Include first: no tug of war with them."""
    line = sshconfig.include_line(gpufleet_home)
    text = f"Include ~/.orbstack/ssh/config\ninclude={line.split(' ', 1)[1]}\n\nHost x\n"
    assert sshinclude.with_include(text, line) == text


def test_a_linked_config_stays_a_link(tmp_path, gpufleet_home):
    """Dotfile managers (stow, chezmoi) link ~/.ssh/config into a repository."""
    real = tmp_path / "dotfiles" / "ssh_config"
    real.parent.mkdir()
    real.write_text(USER_CONFIG)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").symlink_to(real)
    assert gpufleet(tmp_path, gpufleet_home, "--install").returncode == 0
    assert (tmp_path / ".ssh" / "config").is_symlink()
    assert first_setting(real.read_text()) == sshconfig.include_line(gpufleet_home)


def test_an_unreadable_config_is_an_error_with_a_fix_and_no_change(tmp_path, gpufleet_home):
    (tmp_path / ".ssh" / "config").mkdir(parents=True)
    r = gpufleet(tmp_path, gpufleet_home, "--install")
    assert r.returncode == 2
    assert "error: cannot update" in r.stderr and "fix:" in r.stderr
    assert "Traceback" not in r.stderr
    assert (tmp_path / ".ssh" / "config").is_dir()


def test_install_takes_no_cluster_name(tmp_path, gpufleet_home):
    r = gpufleet(tmp_path, gpufleet_home, "t", "--install")
    assert r.returncode == 2 and "alone" in r.stderr
    assert not (tmp_path / ".ssh").exists()


def test_the_include_line_is_absolute_and_quoted_when_it_has_a_space(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sshconfig.include_line(Path("rel")) == f"Include {tmp_path}/rel/clusters/*/ssh_config"
    assert sshconfig.include_line(Path("/a b")) == 'Include "/a b/clusters/*/ssh_config"'
