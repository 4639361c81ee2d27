"""`gpufleet:azure:GpuFleet`: VMs in one availability set + proximity group, accelerated NICs."""

from __future__ import annotations

import base64
from typing import Any

import pulumi
import pulumi_azure_native as az

from components.bootstrap import CLOUD_NODE_ENV
from components.catalog import lookup
from components.errors import SpecError
from components.fleet import GpufleetComponent

# Outside 172.16.0.0/16, which the InfiniBand/RDMA network reserves (facts §0.11).
VNET_CIDR = "10.45.0.0/16"
SUBNET_CIDR = "10.45.0.0/20"
HPC_IMAGE = {
    "publisher": "microsoft-dsvm",
    "offer": "ubuntu-hpc",
    "sku": "2204",
    "version": "latest",
}
# Built-in role "Virtual Machine Contributor": lets the node delete its own VM at expiry.
VM_CONTRIBUTOR_ROLE = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"


def check_spec(spec: Any, fabric: str) -> None:
    """Azure-specific refusals, before anything is declared."""
    if not spec.ssh_cidrs:
        raise SpecError(
            "ssh_cidrs",
            "is empty; the NSG would have no address to let SSH in from",
            "list the addresses allowed to SSH, e.g. ssh_cidrs: [203.0.113.7/32]",
        )
    if spec.spot and fabric == "infiniband":
        # ARM refuses Spot VMs in an availability set ("Azure Spot Virtual Machine is not
        # supported in Availability Set", kubernetes-sigs/cluster-api-provider-azure#4432), and
        # without one (or a scale set) the nodes share no InfiniBand network (facts §3.2).
        raise SpecError(
            "spot",
            f"{spec.instance_type} needs its nodes in one availability set for InfiniBand, "
            "and Azure allows no Spot VM in an availability set",
            "set spot: false, or pick a size without InfiniBand (e.g. Standard_NC96ads_A100_v4)",
        )


class GpuFleet(GpufleetComponent):
    cloud = "azure"

    def __init__(self, name: str, spec: Any, opts: pulumi.ResourceOptions | None = None, **kw):
        it = lookup("azure", spec.instance_type)
        check_spec(spec, it.fabric)
        super().__init__(name, spec, opts, **kw)
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
        ppg = az.compute.ProximityPlacementGroup(
            f"{name}-ppg",
            proximity_placement_group_type="Standard",
            intent=az.compute.ProximityPlacementGroupPropertiesIntentArgs(vm_sizes=[it.name]),
            opts=child,
            **common,
        )
        avset = None
        if not spec.spot:  # Spot VMs cannot join one; check_spec keeps InfiniBand sizes off spot
            avset = az.compute.AvailabilitySet(
                f"{name}-avset",
                platform_fault_domain_count=1,
                platform_update_domain_count=1,
                proximity_placement_group=az.compute.SubResourceArgs(id=ppg.id),
                sku=az.compute.SkuArgs(name="Aligned"),
                opts=child,
                **common,
            )
        identity = az.managedidentity.UserAssignedIdentity(f"{name}-ttl-id", opts=child, **common)
        client = az.authorization.get_client_config_output()
        az.authorization.RoleAssignment(
            f"{name}-ttl-role",
            principal_id=identity.principal_id,
            principal_type="ServicePrincipal",
            role_definition_id=client.subscription_id.apply(
                lambda sub: (
                    f"/subscriptions/{sub}/providers/Microsoft.Authorization/"
                    f"roleDefinitions/{VM_CONTRIBUTOR_ROLE}"
                )
            ),
            scope=rg.id,
            opts=child,
        )

        nodes = []
        for i in range(spec.nodes):
            pip = az.network.PublicIPAddress(
                f"{name}-node-{i}-ip",
                public_ip_allocation_method="Static",
                sku=az.network.PublicIPAddressSkuArgs(name="Standard"),
                opts=child,
                **common,
            )
            nic = az.network.NetworkInterface(
                f"{name}-node-{i}-nic",
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
            deploy_env = dict(
                zip(
                    CLOUD_NODE_ENV["azure"],
                    (identity.client_id, client.subscription_id, rg.name),
                    strict=True,
                )
            )
            custom = self.user_data(
                i,
                extra=deploy_env,
            ).apply(lambda t: base64.b64encode(t.encode()).decode())
            vm = az.compute.VirtualMachine(
                f"{name}-node-{i}",
                vm_name=f"{name}-node-{i}",
                hardware_profile=az.compute.HardwareProfileArgs(vm_size=it.name),
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
                    computer_name=f"{name}-node-{i}",
                    admin_username=self.ssh_user,
                    custom_data=custom,
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
                availability_set=az.compute.SubResourceArgs(id=avset.id) if avset else None,
                proximity_placement_group=az.compute.SubResourceArgs(id=ppg.id),
                identity=az.compute.VirtualMachineIdentityArgs(
                    type="UserAssigned", user_assigned_identities=[identity.id]
                ),
                **(
                    {
                        "priority": "Spot",
                        "eviction_policy": "Delete",
                        "billing_profile": az.compute.BillingProfileArgs(max_price=-1),
                    }
                    if spec.spot
                    else {}
                ),
                opts=child,
                **common,
            )
            nodes.append(
                {
                    "private_ip": nic.ip_configurations.apply(lambda c: c[0].private_ip_address),
                    "public_ip": pip.ip_address,
                    "id": vm.vm_id,
                }
            )
        self.finish(nodes)
