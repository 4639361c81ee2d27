"""ClusterInfo (what every provisioner returns) and the NodeInfo of each of its nodes."""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.components.clouds import Cloud
from gpufleet.components.errors import GpufleetError
from gpufleet.components.fabric import FABRICS
from gpufleet.components.hostkeyrotation import HostKeyRotation


class NodeInfo(BaseModel):
    """One reachable node."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    private_ip: str
    public_ip: str | None = Field(
        None, description="None: no public address; reached through the head (direct-tcpip)"
    )
    ssh_port: int = 22
    private_ssh_port: int | None = Field(
        None,
        description="sshd's port at private_ip, where the other nodes reach it; None: ssh_port"
        " (a VM's ssh_port is forwarded on this machine, inside its network sshd is on 22)",
    )
    gpus: int = 0
    workdir: str = Field("gpufleet", description="job directory; relative paths are from $HOME")
    host_key: str = Field("", description="the node's pinned public host key, 'type base64'")
    instance_id: str | None = None
    bootstrap_host_key: bool = Field(
        False, description="still serving the host key its user data carried (replaced on contact)"
    )


class ClusterInfo(BaseModel):
    """Everything after provisioning reads only this; every provisioner returns the same shape."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str
    cloud: Cloud
    instance_type: str | None = None
    nodes: list[NodeInfo]
    ssh_user: str
    ssh_key_path: str
    known_hosts_path: str
    fabric: str = "none"
    python: str = Field("python3", description="python executable on the nodes")
    env: dict[str, str] = Field(
        default_factory=dict, description="variables every job on this cluster gets"
    )
    created_at: float = Field(default_factory=time.time)
    expires_at: float | None = None
    provider: dict[str, Any] = Field(default_factory=dict, description="provisioner's own data")
    host_key_rotation: HostKeyRotation | None = Field(
        None, description="how to replace bootstrap host keys; None: the nodes' keys are final"
    )

    @field_validator("fabric")
    @classmethod
    def _fabric(cls, v: str) -> str:
        if v not in FABRICS:
            raise GpufleetError(f"fabric {v!r} unknown; expected one of {', '.join(FABRICS)}")
        return v

    @model_validator(mode="after")
    def _names(self) -> ClusterInfo:
        if not self.nodes:
            raise GpufleetError(f"cluster {self.name!r} has no nodes")
        want = [f"node-{i}" for i in range(len(self.nodes))]
        got = [n.name for n in self.nodes]
        if got != want:
            raise GpufleetError(f"nodes must be named {want} head first, got {got}")
        return self

    @property
    def head(self) -> NodeInfo:
        return self.nodes[0]

    def jump_host(self, node: NodeInfo) -> NodeInfo | None:
        """The node to tunnel through to reach `node`: the head, if `node` has no public address."""
        from gpufleet.components.nodelookup import jump_host

        return jump_host(self.nodes, node)

    def node(self, name_or_index: str | int) -> NodeInfo:
        from gpufleet.components.nodelookup import find_node

        return find_node(self.name, self.nodes, name_or_index)


def node_names(count: int) -> list[str]:
    """The stable node names, head first."""
    return [f"node-{i}" for i in range(count)]
