"""Workers without a public address, reached through the head: gpufleet, OpenSSH, the CLI."""

from __future__ import annotations

import socket
import subprocess

from gpufleet.core import state
from gpufleet.remote import Group, connection, sshconfig
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = requires_sshd


def _guard_direct_connections(monkeypatch, info) -> list[tuple[str, int]]:
    """Record every TCP connection gpufleet opens itself; refuse any to a worker's sshd."""
    workers = {(n.private_ip, n.ssh_port) for n in info.nodes[1:]}
    opened: list[tuple[str, int]] = []
    real = socket.create_connection

    def create_connection(address, *a, **kw):
        opened.append(tuple(address))
        if tuple(address) in workers:
            raise ConnectionRefusedError(f"test: {address} is not reachable from the client")
        return real(address, *a, **kw)

    monkeypatch.setattr(connection.socket, "create_connection", create_connection)
    return opened


def test_workers_are_reached_through_the_heads_connection_only(make_sandbox, monkeypatch):
    info = make_sandbox("t", 4)
    head = info.nodes[0]
    assert head.public_ip and all(n.public_ip is None for n in info.nodes[1:])
    opened = _guard_direct_connections(monkeypatch, info)
    with Group(info) as g:
        g.wait_ready(30)
        r = g.run("echo $GPUFLEET_NODE")
        head_t = g._transports["node-0"]
        # every worker's SSH session runs inside a channel of the head's one connection
        assert all(g._transports[n.name].sock.get_transport() is head_t for n in info.nodes[1:])
    assert {n: x.stdout.strip() for n, x in r.items()} == {
        f"node-{i}": f"node-{i}" for i in range(4)
    }
    # the client itself only ever dialled the head (more than once: the key replacement
    # reconnects, and may meet the head's sshd while it re-executes)
    assert set(opened) == {(head.public_ip, head.ssh_port)}


def test_public_workers_are_connected_to_directly(make_sandbox, monkeypatch):
    info = make_sandbox("t", 3, public_workers=True)
    assert all(n.public_ip == n.private_ip for n in info.nodes)
    opened: list[tuple[str, int]] = []
    real = socket.create_connection
    monkeypatch.setattr(
        connection.socket,
        "create_connection",
        lambda address, *a, **kw: opened.append(tuple(address)) or real(address, *a, **kw),
    )
    with Group(info) as g:
        g.run("true")
    assert sorted(opened) == sorted((n.private_ip, n.ssh_port) for n in info.nodes)


def test_openssh_reaches_a_worker_with_proxyjump_and_pinned_keys(make_sandbox, tmp_path):
    info = make_sandbox("t", 3)
    with Group(info) as g:
        g.wait_ready(30)  # first contact: the nodes' own host keys replace the bootstrap ones
    info = state.load("t")
    cfg = tmp_path / "cfg"
    cfg.write_text(sshconfig.render(info))
    shown = subprocess.run(
        ["ssh", "-G", "-F", str(cfg), "t-node-2"], capture_output=True, text=True, check=True
    ).stdout
    assert "proxyjump t-node-0" in shown and f"hostname {info.nodes[2].private_ip}" in shown
    out = subprocess.run(
        [
            "ssh",
            "-F",
            str(cfg),
            "-o",
            "StrictHostKeyChecking=yes",
            "t-node-2",
            "echo $GPUFLEET_NODE",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "node-2"


def test_cli_ssh_exec_and_run_through_the_head(gpufleet_home, tmp_path):
    up = gpufleet(gpufleet_home, "up", "--nodes", "3", "--name", "t")
    try:
        assert up.returncode == 0, up.stderr
        r = gpufleet(gpufleet_home, "ssh", "t", "node-1", "echo", "via head: $GPUFLEET_NODE")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "via head: node-1"
        r = gpufleet(gpufleet_home, "exec", "t", "--", "echo", "$GPUFLEET_NODE")
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.splitlines()) == [f"[node-{i}] node-{i}" for i in range(3)]
        # a worker alone: the head is connected for the tunnel, and runs nothing
        r = gpufleet(gpufleet_home, "exec", "t", "--node", "node-2", "--", "echo", "$GPUFLEET_NODE")
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == ["[node-2] node-2"]
        r = gpufleet(
            gpufleet_home,
            "run",
            "--cluster",
            "t",
            "--workdir",
            str(tmp_path),
            "--launcher",
            "none",
            "--",
            "echo",
            "rank on $GPUFLEET_NODE",
        )
        assert r.returncode == 0, r.stderr
        assert all(f"rank on node-{i}" in r.stdout for i in range(3))
    finally:
        gpufleet(gpufleet_home, "down", "t")


def test_a_dropped_head_connection_is_reopened_and_no_thread_prints_a_traceback(
    make_sandbox, monkeypatch, capfd
):
    """The head's one connection carries every worker's: cut it, and the next command re-opens
    it once and reaches every worker again (each worker's channel tried on its own)."""
    info = make_sandbox("t", 4)
    opened = _guard_direct_connections(monkeypatch, info)
    with Group(info) as g:
        g.wait_ready(30)
        g.run("true")
        dialled = len(opened)
        g._transports["node-0"].sock.shutdown(socket.SHUT_RDWR)  # the network drops it
        r = g.run("echo $GPUFLEET_NODE")
    assert {n: x.stdout.strip() for n, x in r.items()} == {
        f"node-{i}": f"node-{i}" for i in range(4)
    }
    assert len(opened) == dialled + 1  # the head, once
    assert "Traceback" not in capfd.readouterr().err
