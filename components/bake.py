"""What every cloud's ImageBake shares: a builder VM runs the recipe, its disk becomes an image.

The capture must not start before the recipe finished, and no cloud API says when cloud-init
is done. `BuilderReady` therefore connects to the builder over SSH (pinned host key), waits for
the readiness marker, clears the per-node state (cloud-init, env, marker) and powers it off;
the image resource depends on it. The image is kept when the bake stack is destroyed
(retain_on_delete), so `gpufleet image bake` removes the builder and its network right after.
"""

from __future__ import annotations

import time
from typing import Any

import pulumi
import pulumi.dynamic

from components.fleet import fleet_tags, node_user_data
from components.keys import cluster_keys

READY_TIMEOUT_S = 90 * 60
# Leave the image clean: the next boot is a new node with its own cloud-init, env and keys.
SEAL_COMMAND = (
    "sudo cloud-init clean --logs --machine-id && "
    "sudo rm -f /etc/gpufleet/env /etc/gpufleet/nccl.env /var/lib/gpufleet/ready.json "
    "/etc/ssh/ssh_host_* && sudo systemctl poweroff"
)


class _BuilderReadyProvider(pulumi.dynamic.ResourceProvider):
    """create(): wait for the builder's readiness marker over SSH, seal it, power it off."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        import base64
        import io

        import paramiko

        host, user = props["host"], props["user"]
        key = paramiko.Ed25519Key.from_private_key(io.StringIO(props["private_key"]))
        pinned = props["host_key"].split()
        deadline = time.monotonic() + float(props.get("timeout_s", READY_TIMEOUT_S))
        delay, marker = 5.0, None
        while marker is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"builder {host}: no readiness marker within the deadline")
            try:
                client = paramiko.SSHClient()
                host_key = paramiko.PKey.from_type_string(pinned[0], base64.b64decode(pinned[1]))
                client.get_host_keys().add(host, pinned[0], host_key)
                client.connect(host, username=user, pkey=key, timeout=20, allow_agent=False,
                               look_for_keys=False)  # fmt: skip
                _, out, _ = client.exec_command("cat /var/lib/gpufleet/ready.json 2>/dev/null")
                text = out.read().decode()
                if text.strip():
                    marker = text
                    client.exec_command(SEAL_COMMAND)
                client.close()
            except (OSError, paramiko.SSHException):
                pass  # not up yet (or rebooting after the driver install)
            if marker is None:
                time.sleep(delay)
                delay = min(delay * 1.5, 60.0)
        return pulumi.dynamic.CreateResult(id_=f"ready-{host}", outs={**props, "ready": marker})


class BuilderReady(pulumi.dynamic.Resource):
    """Done when the builder finished the recipe and was sealed and powered off."""

    ready: pulumi.Output[str]

    def __init__(self, name: str, props: dict[str, Any], opts: pulumi.ResourceOptions):
        super().__init__(_BuilderReadyProvider(), name, {**props, "ready": None}, opts)


class ImageBakeComponent(pulumi.ComponentResource):
    """Base of `gpufleet:<cloud>:ImageBake`: keys, tags, the builder's cloud-init and the wait."""

    cloud: str = ""

    def __init__(self, name: str, spec: Any, opts: pulumi.ResourceOptions | None = None):
        super().__init__(f"gpufleet:{self.cloud}:ImageBake", name, None, opts)
        self.spec = spec
        self.tags = fleet_tags(spec, int(time.time()) + 3 * 3600)
        self.ssh_user = spec.effective_ssh_user or "gpufleet"
        self.keys = cluster_keys(name, 1, self)

    def child(self, **kw: Any) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, **kw)

    def user_data(self) -> pulumi.Output[str]:
        """The recipe for the builder: no TTL timer (it would be baked into every node)."""
        return node_user_data(
            self.spec, self.ssh_user, self.keys, 0, 1, None, {"GPUFLEET_BAKE": "1"}
        )

    def wait_ready(self, host: pulumi.Input[str], builder: Any) -> BuilderReady:
        return BuilderReady(
            f"{self._name}-ready",
            {
                "host": host,
                "user": self.ssh_user,
                "private_key": pulumi.Output.secret(self.keys.user.private_key_openssh),
                "host_key": self.keys.hosts[0].public_key_openssh,
                "builder": builder.id,
            },
            self.child(depends_on=[builder]),
        )

    def finish(self, image_id: pulumi.Input[str]) -> None:
        self.image_id = pulumi.Output.from_input(image_id)
        self.register_outputs({"image_id": self.image_id})


def bake_program(spec: Any) -> dict[str, Any]:
    """Declare the spec's cloud's ImageBake; its exports (the image id a stack can name)."""
    from components.registry import bake_class

    bake = bake_class(spec.cloud)(f"{spec.name}-image", spec)
    return {"image_id": bake.image_id}
