"""OpenSSH client config for a cluster: one Host entry per node, pinned known_hosts."""

from __future__ import annotations

from components.spec import ClusterInfo


def render(info: ClusterInfo) -> str:
    """Host entries matching `node-K`, `<cluster>-node-K` and the addresses hostfiles use.

    With this file alone, `ssh -F cfg node-2`, VS Code Remote-SSH, and OpenSSH-based
    launchers reading a hostfile (mpirun, pdsh, deepspeed) reach the right node with the
    cluster key, and refuse any host key but the pinned one.
    """
    blocks = [f"# gpufleet cluster {info.name} ({info.cloud}): `gpufleet ssh-config {info.name}`"]
    for n in info.nodes:
        patterns = dict.fromkeys([f"{info.name}-{n.name}", n.name, n.private_ip])
        blocks.append(
            "\n".join(
                [
                    "Host " + " ".join(patterns),
                    f"    HostName {n.public_ip}",
                    f"    Port {n.ssh_port}",
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
