"""Azure pieces a fleet and a bake share: resource group, VNet clear of 172.16/16, NSG, NIC, VM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_azure_native as az

from gpufleet.components.azure.byo import Brought
from gpufleet.components.azure.customdata import encode_custom_data
from gpufleet.components.azure.security import security_profile

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

# Outside 172.16.0.0/16, which the InfiniBand/RDMA network reserves: the VNet's whole address
# space must not overlap it (learn.microsoft.com/azure/virtual-machines/setup-infiniband).
VNET_CIDR = "10.45.0.0/16"
SUBNET_CIDR = "10.45.0.0/20"
# A pinned version, not "latest": the recipe keeps the image's driver only on the version
# set's branch, so an image that moved to another branch would have its driver replaced by
# the recipe on every new node. 22.04.2026082801 is the newest version named in public
# deployment files read offline; confirm with `az vm image list --publisher microsoft-dsvm
# --offer ubuntu-hpc --sku 2204 --all` (docs/clouds.md, "Azure image and NCCL").
HPC_IMAGE = {
    "publisher": "microsoft-dsvm",
    "offer": "ubuntu-hpc",
    "sku": "2204",
    "version": "22.04.2026082801",
}


@dataclass
class Network:
    rg: Any  # .name and .id: the fleet's own group, or an ExistingGroup
    common: dict[str, Any]  # resource_group_name, location, tags: every regional resource
    subnet_id: Any
    nsg_id: Any
    ssh_asg: Any | None  # NICs in this application security group take SSH from spec.ssh_cidrs
    extra_asgs: list[Any]  # the user's own application security groups every NIC joins


@dataclass
class ExistingGroup:
    """A resource group the program owns, named like a ResourceGroup resource's outputs."""

    name: pulumi.Output[str]
    id: pulumi.Output[str]


def existing_group(name: pulumi.Input[str], subscription: pulumi.Input[str]) -> ExistingGroup:
    group = pulumi.Output.from_input(name)
    return ExistingGroup(
        name=group,
        id=pulumi.Output.concat("/subscriptions/", subscription, "/resourceGroups/", group),
    )


def build_network(
    name: str,
    spec: ClusterSpec,
    tags: dict[str, str],
    opts: pulumi.ResourceOptions,
    brought: Brought | None = None,
    subscription: pulumi.Input[str] | None = None,
) -> Network:
    """Resource group, VNet + subnet, and an NSG letting SSH in from spec.ssh_cidrs only; the
    user's own group, subnet or NSG instead of each where `brought` names one."""
    brought = brought or Brought()
    location = spec.effective_region
    rg: Any
    if brought.resource_group_name is not None:
        assert subscription is not None
        rg = existing_group(brought.resource_group_name, subscription)
    else:
        rg = az.resources.ResourceGroup(f"{name}-rg", location=location, tags=tags, opts=opts)
    common: dict[str, Any] = {"resource_group_name": rg.name, "location": location, "tags": tags}
    extra = list(brought.application_security_group_ids)
    ssh_asg = None
    if brought.network_security_group_id is not None:
        nsg_id = brought.network_security_group_id  # its rules decide SSH (check_spec)
    else:
        ssh_asg = az.network.ApplicationSecurityGroup(f"{name}-ssh-asg", opts=opts, **common)
        nsg_id = ssh_nsg(name, spec, ssh_asg, common, opts).id
    if brought.subnet_id is not None:
        # The user's subnet, left as it is: its NSG, routes and egress are theirs.
        return Network(rg, common, brought.subnet_id, nsg_id, ssh_asg, extra)
    vnet = az.network.VirtualNetwork(
        f"{name}-vnet",
        address_space=az.network.AddressSpaceArgs(address_prefixes=[VNET_CIDR]),
        opts=opts,
        **common,
    )
    nat = None
    if not spec.public_workers and spec.nodes > 1:
        nat = worker_nat(name, common, opts)
    # The NSG on the subnet as well as on each NIC: a NIC made later in the subnet without it
    # (by hand, or another tool) is still behind the rules.
    subnet = az.network.Subnet(
        f"{name}-subnet",
        resource_group_name=rg.name,
        virtual_network_name=vnet.name,
        address_prefix=SUBNET_CIDR,
        nat_gateway=az.network.SubResourceArgs(id=nat.id) if nat else None,
        network_security_group=az.network.NetworkSecurityGroupArgs(id=nsg_id),
        opts=opts,
    )
    return Network(rg, common, subnet.id, nsg_id, ssh_asg, extra)


def ssh_nsg(
    name: str, spec: ClusterSpec, ssh_asg: Any, common: dict[str, Any], opts: pulumi.ResourceOptions
) -> Any:
    """An NSG letting SSH in from spec.ssh_cidrs to the NICs in `ssh_asg` only."""
    return az.network.NetworkSecurityGroup(
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
                # Only the NICs in the group (the head's, or every node's with
                # public_workers); workers take SSH from the head (AllowVnetInBound).
                destination_application_security_groups=[
                    az.network.ApplicationSecurityGroupArgs(id=ssh_asg.id)
                ],
                destination_port_range="22",
            )
        ],
        opts=opts,
        **common,
    )


def worker_nat(name: str, common: dict[str, Any], opts: pulumi.ResourceOptions) -> Any:
    """A NAT gateway for the VMs without a public IP (the workers): new VNets give VMs no
    default outbound access. A VM with its own public IP (the head) still takes inbound SSH
    on it, and the replies leave the way they came."""
    ip = az.network.PublicIPAddress(
        f"{name}-nat-ip",
        public_ip_allocation_method="Static",
        sku=az.network.PublicIPAddressSkuArgs(name="Standard"),
        opts=opts,
        **common,
    )
    return az.network.NatGateway(
        f"{name}-nat",
        sku=az.network.NatGatewaySkuArgs(name="Standard"),
        public_ip_addresses=[az.network.SubResourceArgs(id=ip.id)],
        opts=opts,
        **common,
    )


def public_nic(
    name: str, net: Network, opts: pulumi.ResourceOptions, public: bool = True
) -> tuple[Any, Any]:
    """An accelerated NIC in the subnet behind the NSG; with a static public IP and in the
    SSH group when `public` (the head, unless spec.public_workers). pip is None otherwise."""
    pip = None
    if public:
        pip = az.network.PublicIPAddress(
            f"{name}-ip",
            public_ip_allocation_method="Static",
            sku=az.network.PublicIPAddressSkuArgs(name="Standard"),
            opts=opts,
            **net.common,
        )
    nic = az.network.NetworkInterface(
        f"{name}-nic",
        enable_accelerated_networking=True,
        network_security_group=az.network.NetworkSecurityGroupArgs(id=net.nsg_id),
        ip_configurations=[
            az.network.NetworkInterfaceIPConfigurationArgs(
                name="primary",
                primary=True,
                subnet=az.network.SubnetArgs(id=net.subnet_id),
                private_ip_allocation_method="Dynamic",
                public_ip_address=az.network.PublicIPAddressArgs(id=pip.id) if pip else None,
                application_security_groups=[
                    az.network.ApplicationSecurityGroupArgs(id=a)
                    for a in ([net.ssh_asg.id] if public and net.ssh_asg else []) + net.extra_asgs
                ]
                or None,
            )
        ],
        opts=opts,
        **net.common,
    )
    return pip, nic


def vm_profiles(
    vm_name: str,
    size: str,
    spec: ClusterSpec,
    admin: str,
    public_key: pulumi.Input[str],
    user_data: pulumi.Output[str],
    nic: Any,
    os_disk_name: str | None = None,
) -> dict[str, Any]:
    """The VirtualMachine arguments every gpufleet VM shares: size, image, disk, login, NIC,
    boot diagnostics and security type."""
    return {
        "vm_name": vm_name,
        "hardware_profile": az.compute.HardwareProfileArgs(vm_size=size),
        "storage_profile": az.compute.StorageProfileArgs(
            image_reference=az.compute.ImageReferenceArgs(
                **({"id": spec.image} if spec.image else HPC_IMAGE)
            ),
            os_disk=az.compute.OSDiskArgs(
                name=os_disk_name,
                create_option="FromImage",
                delete_option="Delete",
                disk_size_gb=spec.disk_gb,
                managed_disk=az.compute.ManagedDiskParametersArgs(
                    storage_account_type="Premium_LRS"
                ),
            ),
        ),
        "os_profile": az.compute.OSProfileArgs(
            computer_name=vm_name,
            admin_username=admin,
            custom_data=user_data.apply(encode_custom_data),
            linux_configuration=az.compute.LinuxConfigurationArgs(
                disable_password_authentication=True,
                ssh=az.compute.SshConfigurationArgs(
                    public_keys=[
                        az.compute.SshPublicKeyArgs(
                            path=f"/home/{admin}/.ssh/authorized_keys",
                            key_data=pulumi.Output.from_input(public_key).apply(str.strip),
                        )
                    ]
                ),
            ),
        ),
        # The serial log (cloud-init's output, the recipe's failures) in managed storage: no
        # storageUri means a platform-managed account.
        "diagnostics_profile": az.compute.DiagnosticsProfileArgs(
            boot_diagnostics=az.compute.BootDiagnosticsArgs(enabled=True)
        ),
        # A custom image need not declare Trusted Launch support: ARM's default there.
        "security_profile": None if spec.image else security_profile(size),
        "network_profile": az.compute.NetworkProfileArgs(
            network_interfaces=[
                # Detach, not Delete: a VM replaced (customData, image) must find its NIC
                # again, and a NIC bills nothing once its VM is gone.
                az.compute.NetworkInterfaceReferenceArgs(
                    id=nic.id, primary=True, delete_option="Detach"
                )
            ]
        ),
    }
