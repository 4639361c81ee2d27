"""OpenSSH client config of a cluster: `<cluster>-node-K` and `<cluster>` hosts, pinned keys."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.remote import sshopts
from gpufleet.remote.knownhosts import private_port

FILE = "ssh_config"  # in the cluster's state folder: `Include` picks it up, `down` removes it


def alias(info: ClusterInfo, node: NodeInfo) -> str:
    """A node's own host name, `<cluster>-node-K`: cluster-qualified, so the files of several
    clusters can be included side by side."""
    return f"{info.name}-{node.name}"


def aliases(info: ClusterInfo, node: NodeInfo) -> list[str]:
    """Host names of a node: its alias, and `<cluster>` for the head."""
    own = alias(info, node)
    return [info.name, own] if node.name == info.head.name else [own]


def render(info: ClusterInfo, *, internal: bool = False, control_persist: str | None = None) -> str:
    """Host entries for every node of the cluster.

    internal: the file nodes use to reach each other (launchers on the head: mpirun's
    `plm_rsh_args -F`, DeepSpeed's pdsh): private addresses instead of public ones.
    control_persist: add `ControlMaster auto` with this `ControlPersist`, so OpenSSH tools
    reuse one connection per node.
    """
    head = f"# gpufleet cluster {info.name} ({info.cloud}): `gpufleet ssh-config {info.name}`"
    blocks = [head]
    for n in info.nodes:
        # A node without a public address is reached through the head (`ProxyJump`), at the
        # private address it is pinned under. ProxyJump names the head by its cluster alias,
        # which this same file defines; ssh hands its -F file on to the jump connection.
        jump_host = None if internal else info.jump_host(n)
        lines = [
            "Host " + " ".join(aliases(info, n)),
            f"    HostName {n.private_ip if internal else (n.public_ip or n.private_ip)}",
            f"    Port {private_port(n) if internal else n.ssh_port}",
            *([] if jump_host is None else [f"    ProxyJump {alias(info, jump_host)}"]),
            f"    User {info.ssh_user}",
            f"    IdentityFile {info.ssh_key_path}",
            *sshopts.as_config(sshopts.pinned(info.known_hosts_path, "ssh-ed25519")),
        ]
        if control_persist:
            # %C: a hash of (local host, remote host, port, user): short and unique per node.
            control_dir = Path(info.known_hosts_path).parent
            lines += [
                "    ControlMaster auto",
                f"    ControlPath {control_dir}/cm-%C",
                f"    ControlPersist {control_persist}",
            ]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def include_line(home: Path) -> str:
    """The one line for ~/.ssh/config (before any Host block) that picks up every cluster.

    Absolute (OpenSSH reads a relative Include from ~/.ssh), quoted when it has a space.
    """
    pattern = f"{os.path.abspath(home)}/clusters/*/{FILE}"
    return f'Include "{pattern}"' if any(c.isspace() for c in pattern) else f"Include {pattern}"


def write(info: ClusterInfo, control_persist: str | None = None) -> Path:
    """The cluster's ssh config in its state folder, where `Include` finds it (see
    include_line) and from where `down` removes it with the rest of the folder."""
    from gpufleet.core import state

    path = state.cluster_dir(info.name) / FILE
    state.write_private(path, render(info, control_persist=control_persist))
    return path
