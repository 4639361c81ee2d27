"""Azure: what bills has a backstop outside the node, and the node's identity can only remove
itself (issue 19 items 16 and 20)."""

from __future__ import annotations

import datetime

import pytest

from tests.components.stackplans import plan

VM = "azure-native:compute:VirtualMachine"
SCHEDULE = "azure-native:devtestlab:GlobalSchedule"

# Auto-shutdown of an ARM VM (read 2026-11-25): a Microsoft.DevTestLab/schedules resource (REST
# "Global Schedules", learn.microsoft.com/rest/api/dtl/global-schedules) named
# "shutdown-computevm-{VM name}" (anything else is a 400), task "ComputeVmShutdownTask", daily
# recurrence only, its time as HHmm in the schedule's time zone (hashicorp/terraform-provider-
# azurerm#5536, azurerm_dev_test_global_vm_shutdown_schedule); it "stops and deallocates your
# VMs" (learn.microsoft.com/azure/cost-management-billing/understand/plan-manage-costs, "auto
# shutdown"); a deallocated VM is not billed for compute, its disks are
# (learn.microsoft.com/azure/virtual-machines/states-billing).
AUTO_SHUTDOWN = {
    "name": "shutdown-computevm-{vm}",
    "taskType": "ComputeVmShutdownTask",
    "recurrence": "dailyRecurrence",
    "time_format": "%H%M",
}
# The node's own delete runs at its expiry and retries for the 10 minutes an RBAC assignment
# may take (role-based-access-control/troubleshooting): the schedule must come later.
PROPAGATION_MIN = 10

# Built-in role "Virtual Machine Contributor" (learn.microsoft.com/azure/role-based-access-
# control/built-in-roles/compute#virtual-machine-contributor, read 2026-11-25): its id and
# some of its actions, wildcards that include runCommand, extensions and resize.
VM_CONTRIBUTOR = "9980e02c-c2be-4d73-94e8-173b1dc7cf3c"
VM_CONTRIBUTOR_ACTIONS = {
    "Microsoft.Compute/virtualMachines/*",
    "Microsoft.Network/networkInterfaces/*",
    "Microsoft.Compute/disks/*",
}
# Azure permissions for Compute and Networking (learn.microsoft.com/azure/role-based-access-
# control/permissions/compute, .../networking): the operations the self-delete and its
# deallocate fallback perform on the VM, and what ARM's deletion of the VM touches: its OS
# disk (deleteOption Delete: deleted with it) and its NIC (deleteOption Detach: only read and
# detached, kept for `gpufleet down`).
SELF_DELETE_NEEDS = {
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/delete",
    "Microsoft.Compute/virtualMachines/deallocate/action",
    "Microsoft.Network/networkInterfaces/read",
    "Microsoft.Compute/disks/read",
    "Microsoft.Compute/disks/delete",
}


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_each_vm_has_an_auto_shutdown_that_deallocates_it_after_its_expiry(stack):
    """A hung node never runs its own timer: Azure's auto-shutdown deallocates the VM from
    outside it (compute stops billing; disks and IPs still bill until `gpufleet down`). It is
    daily: set at the expiry's time of day (UTC) plus the node's retry window, so its first
    firing comes after the node had its chance."""
    p = plan(stack)
    expires = int(p.outputs["expires_at"])
    when = datetime.datetime.fromtimestamp(expires, tz=datetime.timezone.utc)
    schedules = {s.inputs["targetResourceId"]: s for s in p.of_type(SCHEDULE)}
    vms = p.of_type(VM)
    assert len(schedules) == len(vms) == 2
    for vm in vms:
        s = schedules[f"{vm.name}-id"]
        assert s.inputs["name"] == AUTO_SHUTDOWN["name"].format(vm=vm.inputs["vmName"])
        assert s.inputs["taskType"] == AUTO_SHUTDOWN["taskType"]
        assert s.inputs["status"] == "Enabled" and s.inputs["timeZoneId"] == "UTC"
        fires = datetime.datetime.strptime(
            s.inputs[AUTO_SHUTDOWN["recurrence"]]["time"], AUTO_SHUTDOWN["time_format"]
        ).time()
        gap = (
            datetime.datetime.combine(when.date(), fires, tzinfo=datetime.timezone.utc) - when
        ) % datetime.timedelta(days=1)
        assert datetime.timedelta(minutes=PROPAGATION_MIN) < gap < datetime.timedelta(hours=1)


def test_a_ttl_past_a_day_gets_its_schedule_disabled_not_an_early_shutdown():
    """A daily schedule at the expiry's time of day fires first a day before a 2-day expiry:
    it is created disabled then (visible in the portal), never cutting the cluster short."""
    p = plan("azure-nd-a100", ttl_minutes=48 * 60)
    assert {s.inputs["status"] for s in p.of_type(SCHEDULE)} == {"Disabled"}


def test_the_node_role_grants_only_what_the_self_delete_needs():
    """Virtual Machine Contributor's wildcards let any process on the node run commands on its
    VM, install extensions or resize it; the custom role lists exact actions, scoped to the
    cluster's resource group and assigned on each node's own VM, NIC and disk only."""
    p = plan("azure-nd-a100")
    (role,) = [
        r for r in p.of_type("azure-native:authorization:RoleDefinition")
        if r.name.endswith("-node-role")
    ]  # fmt: skip
    (perm,) = role.inputs["permissions"]
    assert set(perm["actions"]) == SELF_DELETE_NEEDS
    assert not VM_CONTRIBUTOR_ACTIONS & set(perm["actions"])
    assert not [a for a in perm["actions"] if "*" in a]
    assert role.inputs["assignableScopes"] == [role.inputs["scope"]] == ["azure-nd-a100-rg-id"]
    for a in p.of_type("azure-native:authorization:RoleAssignment"):
        assert VM_CONTRIBUTOR not in a.inputs["roleDefinitionId"]
        if a.inputs["roleDefinitionId"] == f"{role.name}-id":
            assert a.inputs["scope"] != role.inputs["scope"]  # never the whole group
            assert role.name in a.depends_on


# What the deallocate fallback performs (Azure permissions for Compute, read 2026-11-25):
# POST .../virtualMachines/{vm}/deallocate, and the VM's read.
DEALLOCATE_NEEDS = {
    "Microsoft.Compute/virtualMachines/read",
    "Microsoft.Compute/virtualMachines/deallocate/action",
}


@pytest.mark.parametrize("ttl_hours", [4, 24])
def test_each_node_may_deallocate_before_its_vm_exists(ttl_hours):
    """The VM-scoped assignments need the VM first; a CLI that dies between the VM and them
    would leave a node that can neither delete nor deallocate itself (and for a TTL of 23.5 h
    or more, e.g. the default `gpufleet run --ttl 24h`, no enabled auto-shutdown). A group-scope
    assignment of a deallocate-only role is made before any VM, which waits for it."""
    p = plan("azure-nd-a100", ttl_minutes=ttl_hours * 60)
    roles = {r.name: r for r in p.of_type("azure-native:authorization:RoleDefinition")}
    group = "azure-nd-a100-rg-id"
    at_group = [
        a for a in p.of_type("azure-native:authorization:RoleAssignment")
        if a.inputs["scope"] == group and a.name.endswith("-rg-role")
    ]  # fmt: skip
    ids = {a.inputs["principalId"] for a in at_group}
    vms = p.of_type(VM)
    assert len(at_group) == len(vms) == len(ids)
    for a in at_group:
        (role,) = [r for r in roles.values() if a.inputs["roleDefinitionId"] == f"{r.name}-id"]
        (perm,) = role.inputs["permissions"]
        assert set(perm["actions"]) == DEALLOCATE_NEEDS
    for vm in vms:
        assert {a.name for a in at_group} & set(vm.depends_on)


def test_the_nsg_guards_the_subnet_as_well_as_each_nic():
    """An NSG can be associated with a subnet and with a NIC, and both apply (NSG overview,
    learn.microsoft.com/azure/virtual-network/network-security-group-how-it-works): on the
    subnet it also covers a NIC later made in it without one."""
    p = plan("azure-nd-a100")
    nsg = p.one("azure-native:network:NetworkSecurityGroup")
    subnet = p.one("azure-native:network:Subnet")
    assert subnet.inputs["networkSecurityGroup"]["id"] == f"{nsg.name}-id"
    for nic in p.of_type("azure-native:network:NetworkInterface"):
        assert nic.inputs["networkSecurityGroup"]["id"] == f"{nsg.name}-id"


def test_what_is_made_again_with_a_replaced_vm_is_deleted_first():
    """Role assignments: one per (principal, role, scope); a second with the same three is a
    409 RoleAssignmentExists (learn.microsoft.com/azure/role-based-access-control/
    troubleshooting, read 2026-11-25). The auto-shutdown's name is fixed by its VM's
    ("shutdown-computevm-{vm}", above). Either, made again with a replaced VM, must go first."""
    p = plan("azure-nd-a100")
    again = [
        r for r in p.of_type("azure-native:authorization:RoleAssignment")
        if r.name.endswith(("-vm-role", "-disk-role"))
    ] + p.of_type(SCHEDULE)  # fmt: skip
    assert len(again) == 3 * len(p.of_type(VM))
    assert [r.name for r in again if not r.delete_before_replace] == []


# Logic Apps (read 2026-11-25): a Recurrence trigger with startTime "YYYY-MM-DDThh:mm:ssZ"
# runs first at that time when it is in the future (learn.microsoft.com/azure/connectors/
# connectors-native-recurrence); an HTTP action authenticates with the workflow's managed
# identity as {"type": "ManagedServiceIdentity", "audience": "https://management.azure.com/"}
# (learn.microsoft.com/azure/logic-apps/authenticate-with-managed-identity); Virtual Machines -
# Deallocate is POST {vm id}/deallocate (learn.microsoft.com/rest/api/compute/virtual-machines/
# deallocate).
WORKFLOW = "azure-native:logic:Workflow"
ISO_UTC = "%Y-%m-%dT%H:%M:%SZ"
MSI = {"type": "ManagedServiceIdentity", "audience": "https://management.azure.com/"}


def test_a_ttl_past_the_daily_schedule_gets_an_absolute_time_deallocation():
    """With the daily schedule Disabled (a TTL of 23.5 h or more, the default `gpufleet run`
    among them), a hung node would bill until `down`: a Logic App fires once the expiry plus
    the node's retry window is past and deallocates every VM, from outside the nodes."""
    p = plan("azure-nd-a100", ttl_minutes=24 * 60)
    (flow,) = p.of_type(WORKFLOW)
    expires = int(p.of_type(VM)[0].inputs["tags"]["gpufleet-expires"])
    (trigger,) = flow.inputs["definition"]["triggers"].values()
    start = datetime.datetime.strptime(trigger["recurrence"]["startTime"], ISO_UTC)
    first = start.replace(tzinfo=datetime.timezone.utc).timestamp()
    assert trigger["type"] == "Recurrence" and first >= expires + PROPAGATION_MIN * 60
    actions = flow.inputs["definition"]["actions"].values()
    assert sorted(a["inputs"]["uri"] for a in actions) == sorted(
        f"https://management.azure.com{vm.name}-id/deallocate?api-version=2024-07-01"
        for vm in p.of_type(VM)
    )
    assert all(a["inputs"]["method"] == "POST" and a["inputs"]["authentication"] == MSI
               for a in actions)  # fmt: skip
    (grant,) = [
        a for a in p.of_type("azure-native:authorization:RoleAssignment")
        if a.inputs["principalId"] == f"principal-{flow.name}"
    ]  # fmt: skip
    (role,) = [
        r for r in p.of_type("azure-native:authorization:RoleDefinition")
        if grant.inputs["roleDefinitionId"] == f"{r.name}-id"
    ]  # fmt: skip
    assert set(role.inputs["permissions"][0]["actions"]) == DEALLOCATE_NEEDS
    assert not plan("azure-nd-a100", ttl_minutes=4 * 60).of_type(WORKFLOW)  # the schedule's
