"""OpenSSH client config for a cluster: one Host entry per node, pinned known_hosts."""

from __future__ import annotations

from components.spec import ClusterInfo


def render(info: ClusterInfo) -> str:
    """Host entries matching `node-K`, `<cluster>-node-K` and the addresses hostfiles use.

    With this file alone, `ssh -F cfg node-2`, VS Code Remote-SSH, and OpenSSH-based
    launchers reading a hostfile (mpirun, pdsh, deepspeed) reach the right node with the
    cluster key, and refuse any host key but the pinned one. A node without a public address
    is reached through the head (`ProxyJump`), at the private address it is pinned under.
    """
    blocks = [f"# gpufleet cluster {info.name} ({info.cloud}): `gpufleet ssh-config {info.name}`"]
    for n in info.nodes:
        patterns = dict.fromkeys([f"{info.name}-{n.name}", n.name, n.private_ip])
        head = info.jump_host(n)
        # ProxyJump names the head by its cluster alias, which this same file defines; ssh
        # hands its -F file on to the jump connection, so `ssh -F cfg node-2` works too.
        jump = [] if head is None else [f"    ProxyJump {info.name}-{head.name}"]
        blocks.append(
            "\n".join(
                [
                    "Host " + " ".join(patterns),
                    f"    HostName {n.public_ip or n.private_ip}",
                    f"    Port {n.ssh_port}",
                    *jump,
                    f"    User {info.ssh_user}",
                    f"    IdentityFile {info.ssh_key_path}",
                    "    IdentitiesOnly yes",
                    "    IdentityAgent none",
                    f"    UserKnownHostsFile {info.known_hosts_path}",
                    "    GlobalKnownHostsFile /dev/null",
                    "    StrictHostKeyChecking yes",
                    "    UpdateHostKeys no",
                    "    HostKeyAlgorithms ssh-ed25519",
                    "    BatchMode yes",
                ]
            )
        )
    return "\n\n".join(blocks) + "\n"
