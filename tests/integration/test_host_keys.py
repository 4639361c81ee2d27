"""A node whose host key is not the pinned one is refused, by gpufleet and by OpenSSH."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpufleet.core import state
from gpufleet.remote import Group
from gpufleet.remote.sshkeys import generate_ed25519
from tests.integration.conftest import gpufleet, requires_sshd

pytestmark = requires_sshd


def _swap_host_key(info, node_index: int) -> None:
    """Pin a different key for one node in known_hosts (as if the node had been replaced)."""
    kh = Path(info.known_hosts_path)
    other = " ".join(generate_ed25519().public_openssh.split()[:2])
    lines = kh.read_text().splitlines()
    host = lines[node_index].split()[0]
    lines[node_index] = f"{host} {other}"
    kh.write_text("\n".join(lines) + "\n")


def test_mismatched_host_key_is_refused(make_sandbox, gpufleet_home, tmp_path):
    info = make_sandbox("t", 2)
    _swap_host_key(info, 1)
    r = gpufleet(gpufleet_home, "exec", "t", "--", "true")
    assert r.returncode == 3
    assert "node-1" in r.stderr and "known_hosts pins" in r.stderr and "refused" in r.stderr
    assert "Traceback" not in r.stderr

    cfg = tmp_path / "cfg"
    cfg.write_text(gpufleet(gpufleet_home, "ssh-config", "t").stdout)
    out = subprocess.run(
        ["ssh", "-F", str(cfg), "t-node-1", "true"], capture_output=True, text=True, timeout=30
    )
    assert out.returncode != 0
    assert "HOST IDENTIFICATION HAS CHANGED" in out.stderr or "verification failed" in out.stderr


def test_unpinned_node_is_refused(make_sandbox, gpufleet_home):
    info = make_sandbox("t", 2)
    kh = Path(info.known_hosts_path)
    kh.write_text(kh.read_text().splitlines()[0] + "\n")  # node-1 not pinned at all
    r = gpufleet(gpufleet_home, "exec", "t", "--", "true")
    assert r.returncode == 3
    assert "node-1" in r.stderr and "no key" in r.stderr


def _node_key_file(info, node) -> Path:
    return Path(node.workdir).parent / "ssh_host_ed25519_key"


def test_first_contact_replaces_the_bootstrap_host_key(make_sandbox):
    """The key the node booted with (its user data, on a cloud) is pinned for the first
    connection only; the node then serves a key made on it, pinned in known_hosts and state."""
    info = make_sandbox("t", 3)
    boot = {n.name: n.host_key for n in info.nodes}
    boot_private = {n.name: _node_key_file(info, n).read_text() for n in info.nodes}
    with Group(info) as g:
        g.wait_ready(30)
        shown = g.run("cat ../ssh_host_ed25519_key.pub; ls ..")
    saved = state.load("t")
    pinned = Path(saved.known_hosts_path).read_text()
    for n in saved.nodes:
        assert not n.bootstrap_host_key
        assert n.host_key != boot[n.name] and n.host_key.startswith("ssh-ed25519 ")
        assert shown[n.name].stdout.startswith(n.host_key)  # what the node serves now
        assert boot[n.name] not in pinned and n.host_key in pinned
        # the bootstrap private key is gone from the node, no leftover next key either
        assert _node_key_file(info, n).read_text() != boot_private[n.name]
        assert ".next" not in shown[n.name].stdout
    assert len(pinned.splitlines()) == 3


def test_the_bootstrap_key_is_useless_afterwards(make_sandbox, gpufleet_home, tmp_path):
    """Whoever read the bootstrap key (instance metadata, user data) cannot pass for the
    node: a client pinning it is refused, by gpufleet and by OpenSSH."""
    info = make_sandbox("t", 2)
    kh = Path(info.known_hosts_path)
    bootstrap_pins = kh.read_text()
    with Group(info) as g:
        g.wait_ready(30)
    cfg = tmp_path / "cfg"
    cfg.write_text(gpufleet(gpufleet_home, "ssh-config", "t").stdout)
    ok = subprocess.run(
        ["ssh", "-F", str(cfg), "t-node-1", "true"], capture_output=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr

    kh.write_text(bootstrap_pins)  # pin the bootstrap keys again
    r = gpufleet(gpufleet_home, "exec", "t", "--", "true")
    assert r.returncode == 3
    assert "known_hosts pins" in r.stderr and "refused" in r.stderr
    for node in ("t-node-0", "t-node-1"):
        out = subprocess.run(
            ["ssh", "-F", str(cfg), node, "true"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode != 0
        assert (
            "HOST IDENTIFICATION HAS CHANGED" in out.stderr or "verification failed" in out.stderr
        )


def test_a_replacement_cut_short_is_finished_on_the_next_contact(make_sandbox):
    """A CLI that dies after the node switched keys, before recording the new one, must not
    leave a node nobody can verify: the new key was pinned next to the old one first."""
    from gpufleet.remote import hostkeys, knownhosts

    info = make_sandbox("t", 2)
    rot = info.host_key_rotation
    with Group(info) as g:
        g._connect_all(30)  # connected, without the first-contact replacement
        res = g.run(hostkeys.prepare_command(rot))
        fresh = {n: hostkeys.parse_public_key(n, r.stdout) for n, r in res.items()}
        knownhosts.write(info.known_hosts_path, knownhosts.render(info.nodes, fresh))
        g.run(hostkeys.commit_command(rot))
    # ... and the CLI died here: the state still names the bootstrap keys
    assert all(n.bootstrap_host_key for n in state.load("t").nodes)
    info = state.load("t")
    with Group(info) as g:
        g.wait_ready(30)
        assert all(r.ok for r in g.run("true").values())
    saved = state.load("t")
    assert all(not n.bootstrap_host_key for n in saved.nodes)
    assert Path(saved.known_hosts_path).read_text() == knownhosts.render(saved.nodes)
