"""`gpufleet:azure:ImageBake`: a builder VM runs the recipe; a gallery image version captures it.

Managed images need a generalized (deprovisioned) VM; a Compute Gallery image definition with
os_state Specialized takes the builder as it is, which is what the sealed builder is.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as az

from components.azure.network import build_network, public_nic, vm_profiles
from components.bake import ImageBakeComponent

DEFAULT_BUILDER = "Standard_NC4as_T4_v3"


class ImageBake(ImageBakeComponent):
    cloud = "azure"

    def __init__(self, name: str, spec: Any, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, spec, opts)
        child = self.child()
        tags = self.tags
        net = build_network(name, spec, tags, child)
        common = net.common
        pip, nic = public_nic(name, net, child)
        builder = az.compute.VirtualMachine(
            f"{name}-builder",
            **vm_profiles(
                f"{name}-builder",
                spec.instance_type or DEFAULT_BUILDER,
                spec,
                self.ssh_user,
                self.keys.user.public_key_openssh,
                self.user_data(),
                nic,
            ),
            opts=child,
            **common,
        )
        ready = self.wait_ready(pip.ip_address, builder)
        gallery = az.compute.Gallery(f"{name}-gallery", opts=child, **common)
        definition = az.compute.GalleryImage(
            f"{name}-definition",
            gallery_name=gallery.name,
            os_type="Linux",
            os_state="Specialized",
            hyper_v_generation="V2",
            identifier=az.compute.GalleryImageIdentifierArgs(
                publisher="gpufleet", offer="gpufleet-node", sku=spec.cloud
            ),
            opts=child,
            **common,
        )
        version = az.compute.GalleryImageVersion(
            f"{name}-version",
            gallery_name=gallery.name,
            gallery_image_name=definition.name,
            gallery_image_version_name="1.0.0",
            storage_profile=az.compute.GalleryImageVersionStorageProfileArgs(
                source=az.compute.GalleryArtifactVersionFullSourceArgs(
                    virtual_machine_id=builder.id
                )
            ),
            opts=self.child(depends_on=[ready], retain_on_delete=True),
            **common,
        )
        self.finish(version.id)
