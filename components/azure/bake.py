"""`gpufleet:azure:ImageBake`: a builder VM runs the recipe; a gallery image version captures it.

Managed images need a generalized (deprovisioned) VM; a Compute Gallery image definition with
os_state Specialized takes the builder as it is, which is what the sealed builder is.
"""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pulumi_azure_native as az

from components.azure.fleet import HPC_IMAGE, SUBNET_CIDR, VNET_CIDR
from components.bake import ImageBakeComponent

DEFAULT_BUILDER = "Standard_NC4as_T4_v3"


class ImageBake(ImageBakeComponent):
    cloud = "azure"

    def __init__(self, name: str, spec: Any, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, spec, opts)
        child = self.child()
        tags = self.tags
        location = spec.effective_region
        rg = az.resources.ResourceGroup(f"{name}-rg", location=location, tags=tags, opts=child)
        common = {"resource_group_name": rg.name, "location": location, "tags": tags}
        vnet = az.network.VirtualNetwork(
            f"{name}-vnet",
            address_space=az.network.AddressSpaceArgs(address_prefixes=[VNET_CIDR]),
            opts=child,
            **common,
        )
        subnet = az.network.Subnet(
            f"{name}-subnet",
            resource_group_name=rg.name,
            virtual_network_name=vnet.name,
            address_prefix=SUBNET_CIDR,
            opts=child,
        )
        nsg = az.network.NetworkSecurityGroup(
            f"{name}-nsg",
            security_rules=[
                az.network.SecurityRuleArgs(
                    name="ssh",
                    priority=100,
                    direction="Inbound",
                    access="Allow",
                    protocol="Tcp",
                    source_address_prefixes=spec.ssh_cidrs,
                    source_port_range="*",
                    destination_address_prefix="*",
                    destination_port_range="22",
                )
            ],
            opts=child,
            **common,
        )
        pip = az.network.PublicIPAddress(
            f"{name}-ip",
            public_ip_allocation_method="Static",
            sku=az.network.PublicIPAddressSkuArgs(name="Standard"),
            opts=child,
            **common,
        )
        nic = az.network.NetworkInterface(
            f"{name}-nic",
            enable_accelerated_networking=True,
            network_security_group=az.network.NetworkSecurityGroupArgs(id=nsg.id),
            ip_configurations=[
                az.network.NetworkInterfaceIPConfigurationArgs(
                    name="primary",
                    primary=True,
                    subnet=az.network.SubnetArgs(id=subnet.id),
                    private_ip_allocation_method="Dynamic",
                    public_ip_address=az.network.PublicIPAddressArgs(id=pip.id),
                )
            ],
            opts=child,
            **common,
        )
        builder = az.compute.VirtualMachine(
            f"{name}-builder",
            vm_name=f"{name}-builder",
            hardware_profile=az.compute.HardwareProfileArgs(
                vm_size=spec.instance_type or DEFAULT_BUILDER
            ),
            storage_profile=az.compute.StorageProfileArgs(
                image_reference=az.compute.ImageReferenceArgs(
                    **({"id": spec.image} if spec.image else HPC_IMAGE)
                ),
                os_disk=az.compute.OSDiskArgs(
                    create_option="FromImage",
                    delete_option="Delete",
                    disk_size_gb=spec.disk_gb,
                    managed_disk=az.compute.ManagedDiskParametersArgs(
                        storage_account_type="Premium_LRS"
                    ),
                ),
            ),
            os_profile=az.compute.OSProfileArgs(
                computer_name=f"{name}-builder",
                admin_username=self.ssh_user,
                custom_data=self.user_data().apply(lambda t: base64.b64encode(t.encode()).decode()),
                linux_configuration=az.compute.LinuxConfigurationArgs(
                    disable_password_authentication=True,
                    ssh=az.compute.SshConfigurationArgs(
                        public_keys=[
                            az.compute.SshPublicKeyArgs(
                                path=f"/home/{self.ssh_user}/.ssh/authorized_keys",
                                key_data=self.keys.user.public_key_openssh.apply(str.strip),
                            )
                        ]
                    ),
                ),
            ),
            network_profile=az.compute.NetworkProfileArgs(
                network_interfaces=[
                    az.compute.NetworkInterfaceReferenceArgs(
                        id=nic.id, primary=True, delete_option="Delete"
                    )
                ]
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
