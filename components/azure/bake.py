"""`gpufleet:azure:ImageBake`: a builder VM runs the recipe; a gallery image version captures it.

The capture is a *Generalized* Compute Gallery image made from a snapshot of the builder's OS
disk. A Specialized image would not do: a VM made from one may not carry an osProfile (admin
user, SSH key, custom data), and every gpufleet node needs exactly that for its own cloud-init.
A managed image or a VM-sourced version would need the VM marked generalized through the API;
a disk/snapshot source needs no such call, and the seal (waagent deprovision, cloud-init clean,
host keys and logins removed) is what makes the disk generalized in fact. The gallery lives in
its own resource group which, like the gallery, definition and version, is kept when the bake
stack is destroyed; the builder's resource group goes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_azure_native as az

from gpufleet.components.azure.identity import node_role
from gpufleet.components.azure.network import build_network, public_nic, vm_profiles
from gpufleet.components.bake import ImageBakeComponent
from gpufleet.components.bootstrap import CLOUD_NODE_ENV

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

DEFAULT_BUILDER = "Standard_NC4as_T4_v3"
IMAGE_VERSION = "1.0.0"


def gallery_name(resource_group: str) -> str:
    """A gallery name from its resource group's: letters, digits, '_' and '.', no '-'."""
    return re.sub(r"[^A-Za-z0-9_.]", "_", resource_group).strip("_.")[:80]


class ImageBake(ImageBakeComponent):
    cloud = "azure"
    default_builder = DEFAULT_BUILDER
    backstop = "its expiry timer deletes the VM through its own managed identity (ARM DELETE)"
    # Clears the agent's provisioning state (ovf-env.xml holds the builder's custom data).
    seal_before = ("if command -v waagent >/dev/null; then waagent -force -deprovision; fi",)

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, spec, opts)
        child = self.child()
        net = build_network(name, spec, self.tags, child)
        common = net.common
        pip, nic = public_nic(name, net, child)
        # As a node's: at its expiry the builder deletes itself through its own identity
        # (images/ttl/gpufleet-expire, arm-delete). The role is on the builder's resource group,
        # which holds only this bake's builder, disk, network and snapshot, and is assigned
        # before the VM exists, so it is in place (and propagating) when the VM boots.
        client = az.authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        identity = az.managedidentity.UserAssignedIdentity(f"{name}-id", opts=child, **common)
        # The nodes' narrow self-delete role (components/azure/identity.py), not VM Contributor.
        role = az.authorization.RoleAssignment(
            f"{name}-role",
            principal_id=identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=node_role(name, net.rg, child).id,
            scope=net.rg.id,
            opts=child,
        )
        deploy_env = dict(
            zip(
                CLOUD_NODE_ENV["azure"],
                (identity.client_id, client.subscription_id, net.rg.name),
                strict=True,
            )
        )
        builder = az.compute.VirtualMachine(
            f"{name}-builder",
            **vm_profiles(
                f"{name}-builder",
                spec.instance_type or DEFAULT_BUILDER,
                spec,
                self.ssh_user,
                self.keys.user.public_key_openssh,
                self.user_data(deploy_env),
                nic,
            ),
            identity=az.compute.VirtualMachineIdentityArgs(
                type="UserAssigned", user_assigned_identities=[identity.id]
            ),
            opts=self.child(depends_on=[role]),
            **common,
        )
        ready = self.wait_ready(pip.ip_address, builder)
        os_disk = builder.storage_profile.apply(lambda p: p.os_disk.managed_disk.id)
        snapshot = az.compute.Snapshot(
            f"{name}-osdisk",
            creation_data=az.compute.CreationDataArgs(
                create_option="Copy", source_resource_id=os_disk
            ),
            incremental=False,
            opts=self.child(depends_on=[ready]),
            **common,
        )
        kept = self.child(retain_on_delete=True)
        images: dict[str, Any] = {"location": spec.effective_region, "tags": self.image_tags}
        rg = az.resources.ResourceGroup(f"{name}-images", opts=kept, **images)
        gallery = az.compute.Gallery(
            f"{name}-gallery",
            gallery_name=rg.name.apply(gallery_name),
            resource_group_name=rg.name,
            opts=kept,
            **images,
        )
        definition = az.compute.GalleryImage(
            f"{name}-definition",
            gallery_name=gallery.name,
            resource_group_name=rg.name,
            os_type="Linux",
            os_state="Generalized",
            hyper_v_generation="V2",
            identifier=az.compute.GalleryImageIdentifierArgs(
                publisher="gpufleet", offer="gpufleet-node", sku=spec.instance_type or "any"
            ),
            opts=kept,
            **images,
        )
        version = az.compute.GalleryImageVersion(
            f"{name}-version",
            gallery_name=gallery.name,
            gallery_image_name=definition.name,
            gallery_image_version_name=IMAGE_VERSION,
            resource_group_name=rg.name,
            storage_profile=az.compute.GalleryImageVersionStorageProfileArgs(
                os_disk_image=az.compute.GalleryOSDiskImageArgs(
                    source=az.compute.GalleryDiskImageSourceArgs(id=snapshot.id)
                )
            ),
            opts=self.child(depends_on=[ready], retain_on_delete=True),
            **images,
        )
        self.finish(version.id)
