"""`gpufleet:azure:GpuFleet`: VMs in one availability set + proximity group, accelerated NICs."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as az

from components.azure.network import build_network, public_nic, vm_profiles
from components.bootstrap import CLOUD_NODE_ENV
from components.catalog import lookup
from components.errors import SpecError
from components.fleet import GpufleetComponent

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
        net = build_network(name, spec, tags, child)
        rg, common = net.rg, net.common
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
            public = i == 0 or spec.public_workers
            pip, nic = public_nic(f"{name}-node-{i}", net, child, public)
            deploy_env = dict(
                zip(
                    CLOUD_NODE_ENV["azure"],
                    (identity.client_id, client.subscription_id, rg.name),
                    strict=True,
                )
            )
            vm = az.compute.VirtualMachine(
                f"{name}-node-{i}",
                **vm_profiles(
                    f"{name}-node-{i}",
                    it.name,
                    spec,
                    self.ssh_user,
                    self.keys.user.public_key_openssh,
                    self.user_data(i, extra=deploy_env),
                    nic,
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
                    "public_ip": pip.ip_address if pip else None,
                    "id": vm.vm_id,
                }
            )
        self.finish(nodes)
