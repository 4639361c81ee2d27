"""Renders a node's cloud-init from the images/ templates: a pure function, context -> text."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class BootstrapContext:
    """Everything one node's cloud-init depends on (plain values, no Pulumi outputs)."""

    cluster: str
    cloud: str
    instance_type: str
    node_index: int
    node_count: int
    ssh_user: str
    user_public_key: str
    host_private_key: str
    host_public_key: str
    fabric: str = "none"
    expires_at: float | None = None
    extra: dict[str, str] = field(default_factory=dict)


def render_cloud_init(ctx: BootstrapContext) -> str:
    """The #cloud-config text the node boots with (minimal: user, pinned host key, ready marker)."""
    import json

    import yaml

    doc = {
        "users": [
            "default",
            {
                "name": ctx.ssh_user,
                "sudo": "ALL=(ALL) NOPASSWD:ALL",
                "shell": "/bin/bash",
                "ssh_authorized_keys": [ctx.user_public_key.strip()],
            },
        ],
        "ssh_deletekeys": True,
        "ssh_genkeytypes": [],
        "ssh_keys": {
            "ed25519_private": ctx.host_private_key,
            "ed25519_public": ctx.host_public_key.strip(),
        },
        "write_files": [
            {
                "path": "/var/lib/gpufleet/ready.json",
                "permissions": "0644",
                "content": json.dumps({"cluster": ctx.cluster, "node": ctx.node_index}) + "\n",
            }
        ],
    }
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False)
