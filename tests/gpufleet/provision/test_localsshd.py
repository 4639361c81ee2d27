"""A sandbox node's sshd: key-only config with the session's environment, free addresses."""

from __future__ import annotations

import socket

from gpufleet.provision import localsshd


def test_sshd_config_is_key_only_and_marks_every_session(tmp_path):
    ndir = tmp_path / "c" / "nodes" / "node-1"
    conf = localsshd.sshd_config(
        addr="127.0.1.2", port=2222, node_dir=ndir, cluster_dir=tmp_path / "c", user="me",
        cluster="c", node="node-1",
    )  # fmt: skip
    lines = conf.splitlines()
    assert "ListenAddress 127.0.1.2:2222" in lines and "PasswordAuthentication no" in lines
    assert f"AuthorizedKeysFile {tmp_path / 'c' / 'authorized_keys'}" in lines
    setenv = next(ln for ln in lines if ln.startswith("SetEnv "))
    assert "GPUFLEET_SANDBOX=c GPUFLEET_NODE=node-1" in setenv
    assert f"GPUFLEET_STATE_DIR={ndir} " in setenv and f"TMPDIR={ndir / 'tmp'}" in setenv
    assert f"PATH={localsshd.node_path()} " in setenv


def test_write_is_owner_only_unless_told(tmp_path):
    localsshd._write(tmp_path / "a" / "key", "secret")
    localsshd._write(tmp_path / "a" / "key.pub", "public", 0o644)
    assert (tmp_path / "a" / "key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "a" / "key.pub").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "a" / "key").read_text() == "secret"


def test_picked_addresses_are_loopback_and_their_ports_free(gpufleet_home):
    addrs = localsshd.pick_addresses(3)
    assert len(addrs) == 3 and all(a.startswith("127.") for a in addrs)
    assert len(set(addrs)) == 3 or set(addrs) == {"127.0.0.1"}  # distinct, or ports apart
    port = localsshd.free_port(addrs[0])
    with socket.socket() as s:
        s.bind((addrs[0], port))  # still free


def test_find_sshd_takes_path_then_sbin_else_says_how_to_install(monkeypatch):
    import pytest

    from gpufleet.core.errors import MissingTool

    monkeypatch.setattr(localsshd.shutil, "which", lambda _name: "/opt/bin/sshd")
    assert localsshd.find_sshd() == "/opt/bin/sshd"
    monkeypatch.setattr(localsshd.shutil, "which", lambda _name: None)
    monkeypatch.setattr(localsshd.os, "access", lambda p, _mode: p == "/usr/local/sbin/sshd")
    assert localsshd.find_sshd() == "/usr/local/sbin/sshd"
    monkeypatch.setattr(localsshd.os, "access", lambda _p, _mode: False)
    with pytest.raises(MissingTool) as e:
        localsshd.find_sshd()
    assert "openssh-server" in e.value.hint


class _Clock:
    """time for wait_listening: sleep() moves monotonic() on, nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


class _Running:
    returncode = None

    def poll(self) -> None:
        return None


def _listen_at(monkeypatch, when: dict[str, float]) -> list[str]:
    """Nodes at addresses named after them that accept connections from `when` on."""
    import contextlib
    from types import SimpleNamespace

    clock = _Clock()
    monkeypatch.setattr(localsshd, "time", clock)

    def connect(addr, timeout):
        if clock.now < when[addr[0]]:
            raise ConnectionRefusedError
        return contextlib.nullcontext()

    monkeypatch.setattr(localsshd.socket, "create_connection", connect)
    nodes = [
        SimpleNamespace(name=n, private_ip=n, ssh_port=22, workdir=f"/x/{n}/work") for n in when
    ]
    info = SimpleNamespace(nodes=nodes)
    said: list[str] = []
    localsshd.wait_listening(info, {n: _Running() for n in when}, said.append)
    return said


def test_wait_listening_allows_a_long_start_while_sshds_keep_coming_up(monkeypatch):
    # 3 x 8 s apart: 16 s in all, past START_TIMEOUT_S, but never 10 s without one more
    said = _listen_at(monkeypatch, {"a": 0.0, "b": 8.0, "c": 16.0})
    assert said == ["3 sandbox nodes listening"]


def test_wait_listening_fails_when_none_comes_up_for_the_timeout(monkeypatch):
    import pytest

    from gpufleet.core.errors import GpufleetError

    with pytest.raises(GpufleetError, match=r"no other started for 10s: b$"):
        _listen_at(monkeypatch, {"a": 0.0, "b": 1e9})
