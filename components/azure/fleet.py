"""`gpufleet:index:AzureGpuFleet`: VMs in one availability set + proximity group, fast NICs."""

from typing import Any

import pulumi
import pulumi_azure_native as az

from gpufleet.components.azure.args import AzureGpuFleetArgs
from gpufleet.components.azure.backstop import (
    absolute_backstop,
    auto_shutdown,
    fires_first_after_expiry,
)
from gpufleet.components.azure.byo import bringing, split_args
from gpufleet.components.azure.identity import deallocate_role, node_role
from gpufleet.components.azure.network import build_network, public_nic, vm_profiles
from gpufleet.components.azure.provider import provider_location, with_provider_region
from gpufleet.components.azure.pullaccess import acr_pull, acr_registry_id, refuse_foreign_ecr
from gpufleet.components.azure.rules import check_spec
from gpufleet.components.bootstrap import CLOUD_NODE_ENV
from gpufleet.components.catalog import lookup
from gpufleet.components.fleet import GpufleetComponent, node_user_data
from gpufleet.components.fleetargs import spec_from_args
from gpufleet.components.invokes import asking, invoke_options
from gpufleet.components.registry import offer_check
from gpufleet.components.validators import run_validators

# Immutable on an existing VM: ARM refuses a change with 409 (PropertyChangeNotAllowed), so a
# plain `pulumi up` after a TTL, recipe or image change replaces the VM instead, deleting the
# old one first (a second ND VM at once would need twice the quota, in one availability set).
# The security type changes only on a deallocated VM (trusted-launch-existing-vm.md).
REPLACE_ON = ["osProfile.customData", "storageProfile.imageReference", "securityProfile"]


def os_disk_name(vm_name: str) -> str:
    return f"{vm_name}-osdisk"


class AzureGpuFleet(GpufleetComponent):
    """A GPU fleet on Azure: nodes, network, expiry backstop, and the outputs to reach them."""

    _cloud = "azure"

    def __init__(
        self, name: str, args: AzureGpuFleetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        fields, brought = split_args(args)
        region_skipped = with_provider_region(fields, provider_location(opts))
        spec = spec_from_args(self._cloud, name, fields)
        it = lookup("azure", spec.instance_type or "")
        check_spec(spec, own_nsg=brought.network_security_group_id is not None)
        refuse_foreign_ecr(spec)
        registry = acr_registry_id(spec)  # an ACR image: its registry, else None
        # Every lookup asks the provider the resources use (its subscription and credentials).
        with asking(invoke_options(opts, "azure-native")), bringing(brought):
            # Before anything is registered: ARM's SkuNotAvailable would come only at the VM,
            # after the resource group, network, identities and role assignments exist.
            self.availability = offer_check(self._cloud)(spec, it.name).availability
            # The account (quota, image, subnet): each fact refuses with its fix, or is skipped.
            self.checks = run_validators(spec, it)
        if region_skipped is not None:
            self.checks.insert(0, region_skipped)
        super().__init__(name, spec, opts)
        child = self.child()
        tags = self.tags
        client = az.authorization.get_client_config_output(opts=pulumi.InvokeOptions(parent=self))
        net = build_network(name, spec, tags, child, brought, client.subscription_id)
        rg, common = net.rg, net.common
        ppg = az.compute.ProximityPlacementGroup(
            f"{name}-ppg",
            proximity_placement_group_type="Standard",
            intent=az.compute.ProximityPlacementGroupPropertiesIntentArgs(vm_sizes=[it.name]),
            opts=child,
            **common,
        )
        # InfiniBand connects VMs of one availability set or of one Uniform scale set with a
        # single placement group; a Flexible scale set gets none ("Infiniband Networking: No",
        # azure-compute-docs virtual-machine-scale-sets-orchestration-modes.md). Individual VMs
        # in an availability set keep one VM resource per node (addresses, identity, TTL).
        # Spot VMs cannot join one; check_spec keeps InfiniBand sizes off spot.
        avset = None
        if not spec.spot:
            avset = az.compute.AvailabilitySet(
                f"{name}-avset",
                platform_fault_domain_count=1,
                platform_update_domain_count=1,
                proximity_placement_group=az.compute.SubResourceArgs(id=ppg.id),
                sku=az.compute.SkuArgs(name="Aligned"),
                opts=child,
                **common,
            )
        # A brought group holds the user's other VMs: no role is assigned on it, only on the
        # cluster's own VMs, NICs and disks, and the roles' names say which cluster they serve.
        shared = brought.resource_group_name is not None
        role = node_role(name, rg, child, shared)
        backstop = not fires_first_after_expiry(spec.ttl_minutes)
        fallback = deallocate_role(name, rg, child, shared) if backstop or not shared else None

        def allow(
            label: str,
            identity: Any,
            scope: Any,
            after: list[Any] | None = None,
            again: list[Any] | None = None,
            grant: Any = role,
        ) -> Any:
            return az.authorization.RoleAssignment(
                label,
                principal_id=identity.principal_id,
                principal_type="ServicePrincipal",
                role_definition_id=grant.id,
                scope=scope,
                # the same principal, role and scope again is a 409 RoleAssignmentExists while
                # the old one stands: delete it first
                opts=self.child(
                    depends_on=after or [], replace_with=again, delete_before_replace=bool(again)
                ),
            )

        nodes, vms = [], []
        for i in range(spec.nodes):
            vm_name = f"{name}-node-{i}"
            public = i == 0 or spec.public_workers
            pip, nic = public_nic(vm_name, net, child, public)
            # One identity per node: a process on one node (a container included) can reach
            # only its own VM, never its neighbours.
            identity = az.managedidentity.UserAssignedIdentity(
                f"{vm_name}-id", opts=child, **common
            )
            # Created before the VM, which waits for it: a caller without
            # Microsoft.Authorization/roleAssignments/write (Contributor) fails here, before any
            # GPU VM bills (components/azure/rules.py explains that error).
            nic_role = allow(f"{vm_name}-nic-role", identity, nic.id)
            # Deallocate on the group, before the VM: the fallback never waits on the
            # VM-scoped assignments below (made after the VM, lost if `up` dies in between).
            # Not in a brought group: the node role on its own VM (below) deallocates too.
            before = [nic_role]
            if not shared:
                before.append(allow(f"{vm_name}-rg-role", identity, rg.id, grant=fallback))
            if registry is not None:  # the boot pull logs in with this identity
                before.append(acr_pull(f"{vm_name}-acr-pull", identity, registry, child))
            deploy_env = dict(
                zip(
                    CLOUD_NODE_ENV["azure"],
                    (identity.client_id, client.subscription_id, rg.name),
                    strict=True,
                )
            )
            vm = az.compute.VirtualMachine(
                vm_name,
                **vm_profiles(
                    vm_name,
                    it.name,
                    spec,
                    self.login_user,
                    self.keys.user.public_key_openssh,
                    # no expiry: the node reads it from its tag (EXPIRY_TAG), which a TTL
                    # change updates in place; customData is set only at creation
                    node_user_data(
                        spec, self.login_user, self.keys, i, spec.nodes, None, deploy_env
                    ),
                    nic,
                    os_disk_name=os_disk_name(vm_name),
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
                opts=self.child(
                    depends_on=before,
                    replace_on_changes=REPLACE_ON,
                    delete_before_replace=True,
                ),
                **common,
            )
            # Scoped to the VM and its disk, so made once they exist (a role assignment's scope
            # must exist): the node's self-delete waits out their propagation (gpufleet-expire).
            # Made again with a replaced VM (its assignments and schedule go with the old one).
            again = [vm]
            allow(f"{vm_name}-vm-role", identity, vm.id, again=again)
            disk_id = pulumi.Output.concat(
                "/subscriptions/",
                client.subscription_id,
                "/resourceGroups/",
                rg.name,
                f"/providers/Microsoft.Compute/disks/{os_disk_name(vm_name)}",
            )
            allow(f"{vm_name}-disk-role", identity, disk_id, after=[vm], again=again)
            auto_shutdown(
                vm_name,
                vm,
                self.expires_at,
                spec.ttl_minutes,
                common,
                self.child(replace_with=again, delete_before_replace=True),  # a fixed name
            )
            vms.append(vm)
            nodes.append(
                {
                    "private_ip": nic.ip_configurations.apply(lambda c: c[0].private_ip_address),
                    "public_ip": pip.ip_address if pip else None,
                    "id": vm.vm_id,
                    "host_key_at": vm.id,  # its serial log (boot diagnostics) shows its keys
                }
            )
        if backstop:
            # The daily schedule is Disabled: deallocate at the absolute expiry from outside,
            # allowed on the whole group of the fleet's own, on each VM in a brought group.
            grants = (
                [
                    (
                        f"{name}-expiry-role-{i}",
                        vm.id,
                        # the same principal, role and scope on a replaced VM: delete first
                        self.child(replace_with=[vm], delete_before_replace=True),
                    )
                    for i, vm in enumerate(vms)
                ]
                if shared
                else [(f"{name}-expiry-role", rg.id, child)]
            )
            absolute_backstop(name, vms, self.expires_at, fallback, grants, common, child)
        self.finish(nodes)
