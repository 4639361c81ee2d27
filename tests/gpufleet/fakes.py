"""A ClusterInfo for renderer tests: n nodes on 10.0.0.10+, head first."""

from __future__ import annotations

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo


def cluster(
    gpus: int = 8, n: int = 2, cloud: str = "aws", fabric: str = "none", python: str = "python3"
) -> ClusterInfo:
    return ClusterInfo(
        name="t",
        cloud=cloud,
        ssh_user="ubuntu",
        ssh_key_path="/k/id",
        known_hosts_path="/k/kh",
        fabric=fabric,
        python=python,
        nodes=[
            NodeInfo(
                name=f"node-{i}",
                private_ip=f"10.0.0.{10 + i}",
                public_ip=f"203.0.113.{i}",
                gpus=gpus,
            )
            for i in range(n)
        ],
    )
