"""HostKeyRotation: where a node's host key lives and how its sshd reloads a new one."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class HostKeyRotation(BaseModel):
    """Where a node's host key lives and how its sshd reloads it (see remote/hostkeys.py)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    key_file: str = Field(
        "/etc/ssh/ssh_host_ed25519_key", description="relative paths are from the node's workdir"
    )
    reload: str = "systemctl reload ssh 2>/dev/null || systemctl reload sshd"
    sudo: bool = True
