"""The output contract shared by every cloud's GpuFleet, and its conversion to ClusterInfo."""

from __future__ import annotations

from typing import Any

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.components.hostkeyrotation import HostKeyRotation

# Every GpufleetComponent registers exactly these outputs (tests assert it per cloud).
OUTPUT_NAMES: tuple[str, ...] = (
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


def cluster_info_from_outputs(
    outputs: dict[str, Any],
    *,
    ssh_key_path: str,
    known_hosts_path: str,
    provider: dict | None = None,
) -> ClusterInfo:
    """Build the ClusterInfo the CLI saves, from a stack's plain output values."""
    missing = [k for k in OUTPUT_NAMES if k not in outputs]
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
