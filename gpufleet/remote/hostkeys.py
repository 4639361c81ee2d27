"""Replacing each node's bootstrap host key (readable from user data) over the pinned channel.

A node may boot with a host key its provisioner handed it (the sandbox and `--cloud vm`, and a
cloud node under GPUFLEET_HOST_KEYS=bootstrap, whose user data carried it; by default a cloud
node makes its own and gpufleet pins the one it published: provision/hostkeypin.py): pinned,
so no trust on first use, but on a cloud readable by anyone allowed to describe the instance
and by any process that reaches the metadata service. On first contact, over a connection
that checked that bootstrap key, the node makes a fresh key that never leaves it, gpufleet
pins the new public key, the node's sshd switches to it, and from then on the bootstrap key
is no one's key.

Two phases, so that a CLI dying half-way never leaves a node nobody can verify:
1. `prepare`: the node generates `<key>.next` (or shows the one it already has); gpufleet
   pins it NEXT TO the bootstrap key (known_hosts accepts either) and saves the state;
2. `commit`: the node moves `<key>.next` over the bootstrap key and reloads sshd; gpufleet
   drops the bootstrap key from known_hosts and the state, then reconnects under the new key.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from gpufleet.core.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.components.hostkeyrotation import HostKeyRotation


def _as_root(rot: HostKeyRotation, script: str) -> str:
    return f"sudo -n sh -c {shlex.quote(script)}" if rot.sudo else script


def prepare_command(rot: HostKeyRotation) -> str:
    """Print the node's next host public key, generating the key pair once."""
    k = shlex.quote(rot.key_file)
    return _as_root(
        rot,
        f'k={k}; if [ ! -s "$k.next" ] || [ ! -s "$k.next.pub" ]; then '
        f'rm -f "$k.next" "$k.next.pub" && '
        f"ssh-keygen -q -t ed25519 -N '' -C gpufleet -f \"$k.next\" </dev/null || exit 1; fi; "
        f'cat "$k.next.pub"',
    )


def commit_command(rot: HostKeyRotation) -> str:
    """Put the next key in the bootstrap key's place and make sshd serve it (idempotent)."""
    k = shlex.quote(rot.key_file)
    return _as_root(
        rot,
        f'k={k}; [ -s "$k.next" ] || exit 0; '
        f'mv -f "$k.next.pub" "$k.pub" && mv -f "$k.next" "$k" && {{ {rot.reload}; }}',
    )


def parse_public_key(node: str, stdout: str) -> str:
    """'ssh-ed25519 BASE64' from ssh-keygen's .pub line."""
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "ssh-ed25519":
            return f"{parts[0]} {parts[1]}"
    raise GpufleetError(
        f"{node}: no new host key in the node's answer: {stdout.strip()[-200:]!r}",
        hint="the node needs ssh-keygen (openssh-client) and sudo for the cluster user",
    )


def replace_bootstrap_keys(group: Any, save: Any) -> None:
    """Replace the bootstrap host key of every node of `group` still serving one.

    `group` is connected (every connection checked the pinned key); `save(info)` records
    the cluster state. The group reconnects every node afterwards, checking the new keys.
    """
    from gpufleet.remote import knownhosts

    info = group.info
    rot = info.host_key_rotation
    nodes = [n for n in group.nodes if n.bootstrap_host_key]
    if rot is None or not nodes:
        return
    res = group.run({n.name: prepare_command(rot) for n in nodes}, what="new host key")
    fresh = {n.name: parse_public_key(n.name, res[n.name].stdout) for n in nodes}
    knownhosts.write(info.known_hosts_path, knownhosts.render(info.nodes, fresh))
    group.forget_pins()
    group.run({n.name: commit_command(rot) for n in nodes}, what="switch host key")
    for n in nodes:
        n.host_key, n.bootstrap_host_key = fresh[n.name], False
    knownhosts.write(info.known_hosts_path, knownhosts.render(info.nodes))
    save(info)
    group.reconnect()
