"""The output contract shared by every cloud's GpuFleet, and its conversion to ClusterInfo."""

from __future__ import annotations

from typing import Any

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.components.hostkeyrotation import HostKeyRotation

# What a ClusterInfo is built from: a stack made by an older gpufleet has these at least.
CLUSTER_OUTPUTS: tuple[str, ...] = (
    "cluster_name",
    "cloud",
    "instance_type",
    "fabric",
    "ssh_user",
    "ssh_private_key",  # secret: the cluster's user key, OpenSSH PEM
    # [{name, private_ip, public_ip, gpus, host_key, instance_id[, host_key_at]}], head first;
    # public_ip is None on a node without one (workers by default: reached through the head);
    # host_key "" and host_key_at (the instance's ARN / self link / ARM id): the node made its
    # own host key and publishes it there (gpufleet/provision/hostkeychannels.py reads it)
    "nodes",
    "known_hosts",  # pinned bootstrap host keys, one line per address (none for host_key_at)
    "expires_at",  # epoch seconds
)
# Every GpufleetComponent registers exactly these outputs (tests assert it per cloud): the
# above, then what a plain-`pulumi` user reaches the nodes with, rendered from them.
OUTPUT_NAMES: tuple[str, ...] = (
    *CLUSTER_OUTPUTS,
    "ssh_config",  # OpenSSH config: one Host per node, workers by ProxyJump through the head
    "hostfile",  # Open MPI / DeepSpeed hostfile: private addresses, slots = GPUs
    "head_address",  # the head's public address
)
HOSTFILE_FORMATS: tuple[str, ...] = ("openmpi", "mpich", "deepspeed", "plain")


def known_hosts_lines(nodes: list[dict[str, Any]], port: int = 22) -> str:
    """known_hosts text pinning each node's host key under its public and private address."""
    lines = []
    for n in nodes:
        if not n["host_key"].strip():
            continue  # the node publishes its own (host_key_at)
        for addr in dict.fromkeys(a for a in (n.get("public_ip"), n.get("private_ip")) if a):
            host = addr if port == 22 else f"[{addr}]:{port}"
            lines.append(f"{host} {n['host_key'].strip()}")
    return "\n".join(lines) + "\n"


def hostfile_lines(hosts: list[tuple[str, int]], fmt: str = "openmpi") -> str:
    """A hostfile of (host, slots) pairs, head first, in one of HOSTFILE_FORMATS (the one
    renderer: `gpufleet hostfile` and the stack's `hostfile` output both use it)."""
    if fmt not in HOSTFILE_FORMATS:
        raise ValueError(fmt)
    if fmt in ("openmpi", "deepspeed"):
        lines = [f"{h} slots={k}" for h, k in hosts]
    elif fmt == "mpich":
        lines = [f"{h}:{k}" for h, k in hosts]
    else:
        lines = [h for h, _ in hosts]
    return "\n".join(lines) + "\n"


def hostfile_text(nodes: list[dict[str, Any]]) -> str:
    """The `hostfile` output: each node's private address with its GPUs as slots (one at
    least), as `gpufleet hostfile` writes it by default."""
    return hostfile_lines([(n["private_ip"], max(int(n.get("gpus") or 0), 1)) for n in nodes])


def head_address(nodes: list[dict[str, Any]]) -> str:
    """The `head_address` output: the head's public address (its private one if it has none)."""
    return nodes[0].get("public_ip") or nodes[0]["private_ip"]


def key_file(cluster: str) -> str:
    """Where the `ssh_config` output expects the key saved from `ssh_private_key`."""
    return f"~/.ssh/gpufleet-{cluster}"


def ssh_config_text(cluster: str, cloud: str, ssh_user: str, nodes: list[dict[str, Any]]) -> str:
    """The `ssh_config` output, for `ssh -F FILE CLUSTER` without gpufleet: `CLUSTER` and
    `CLUSTER-node-0` the head at its public address, `CLUSTER-node-K` a worker at its private
    address through the head (ProxyJump; -F is handed on to the jump). Keys from the stack's
    outputs, saved where the header says; host keys checked, never accepted unseen."""
    key = key_file(cluster)
    pinned = any(n["host_key"].strip() for n in nodes)
    header = [
        f"# gpufleet cluster {cluster} ({cloud}), from its fleet's outputs. Save the fleet's",
        "# ssh_private_key and known_hosts outputs where this file looks for them (your",
        "# program's export names; sshPrivateKey/knownHosts from YAML/TypeScript), then",
        f"# `ssh -F THIS_FILE {cluster}`:",
        f"#   (umask 077; pulumi stack output ssh_private_key --show-secrets > {key})",
        f"#   pulumi stack output known_hosts > {key}.known_hosts",
    ]
    if not pinned:
        header += [
            "# known_hosts is empty: the nodes made their own host keys, and ssh refuses a key",
            "# it has not seen (StrictHostKeyChecking yes). `gpufleet attach NAME --stack STACK`",
            "# reads them from the cloud and pins them (then `gpufleet ssh-config NAME`); or put",
            f"# each node's key, read where its host_key_at points, in {key}.known_hosts.",
        ]
    blocks = ["\n".join(header)]
    for i, n in enumerate(nodes):
        own = f"{cluster}-{n['name']}"
        public = n.get("public_ip")
        blocks.append(
            "\n".join(
                [
                    f"Host {cluster} {own}" if i == 0 else f"Host {own}",
                    f"    HostName {public or n['private_ip']}",
                    *([] if public or i == 0 else [f"    ProxyJump {cluster}-{nodes[0]['name']}"]),
                    f"    User {ssh_user}",
                    f"    IdentityFile {key}",
                    "    IdentitiesOnly yes",
                    f"    UserKnownHostsFile {key}.known_hosts",
                    "    StrictHostKeyChecking yes",
                    "    HostKeyAlgorithms ssh-ed25519",
                ]
            )
        )
    return "\n\n".join(blocks) + "\n"


def cluster_info_from_outputs(
    outputs: dict[str, Any],
    *,
    ssh_key_path: str,
    known_hosts_path: str,
    provider: dict | None = None,
) -> ClusterInfo:
    """Build the ClusterInfo the CLI saves, from a stack's plain output values."""
    missing = [k for k in CLUSTER_OUTPUTS if k not in outputs]
    if missing:
        from gpufleet.components.errors import GpufleetError

        raise GpufleetError(f"stack outputs lack {', '.join(missing)}")
    nodes = [
        NodeInfo(
            name=n["name"],
            private_ip=n["private_ip"],
            public_ip=n.get("public_ip") or None,
            gpus=int(n.get("gpus", 0)),
            host_key=n["host_key"],
            instance_id=n.get("instance_id"),
            # A key from the node's user data is replaced on first contact (hostkeys.py); with
            # none, the provisioner pins the one the node published before any connection.
            bootstrap_host_key=bool(n["host_key"]),
        )
        for n in outputs["nodes"]
    ]
    return ClusterInfo(
        name=outputs["cluster_name"],
        cloud=outputs["cloud"],
        instance_type=outputs["instance_type"],
        nodes=nodes,
        ssh_user=outputs["ssh_user"],
        ssh_key_path=ssh_key_path,
        known_hosts_path=known_hosts_path,
        fabric=outputs["fabric"],
        expires_at=float(outputs["expires_at"]),
        provider=provider or {},
        host_key_rotation=HostKeyRotation(),
    )
