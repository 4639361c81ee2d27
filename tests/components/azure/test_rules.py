"""Azure's own rules: `extend` capped at the auto-shutdown, deployment errors explained."""

from __future__ import annotations

import datetime

from gpufleet.components import registry

# Auto-shutdown (learn.microsoft.com/azure/virtual-machines/auto-shutdown-vm and REST "Global
# Schedules", read 2026-11-25): a daily recurrence at a fixed time of day that stops and
# deallocates the VM; gpufleet sets it 30 minutes past the cluster's expiry (the node's own
# delete retries for 10 of them), so the first firing is at expiry + 30 min.
FIRST_FIRING_AFTER_EXPIRY_S = 30 * 60
CREATED = 1_900_000_000  # 2030-03-17 17:46:40 UTC


def test_extend_past_the_auto_shutdown_is_refused_and_within_the_expiry_is_not():
    """`gpufleet extend` moves only the node's own timer: the VM's daily auto-shutdown still
    deallocates it at its old time of day, so an extension past it must be refused, not
    accepted and cut short (gpufleet/provision/pulumi.py calls registry.refuse_extension)."""
    assert registry.refuse_extension("azure", CREATED, CREATED - 60) is None
    assert registry.refuse_extension("azure", CREATED, CREATED) is None
    refusal = registry.refuse_extension("azure", CREATED, CREATED + 6 * 3600)
    assert refusal is not None
    problem, fix = refusal
    firing = datetime.datetime.fromtimestamp(
        CREATED + FIRST_FIRING_AFTER_EXPIRY_S, datetime.timezone.utc
    ).strftime("%H:%M UTC")
    assert "auto-shutdown" in problem and "deallocates" in problem and firing in problem
    assert "ttl_minutes" in fix


# Azure built-in roles (learn.microsoft.com/azure/role-based-access-control/built-in-roles,
# read 2026-11-25): which may write role definitions (custom roles) and role assignments.
# Contributor's NotActions include Microsoft.Authorization/*/Write; Role Based Access Control
# Administrator grants roleAssignments/write only ("Manage access to Azure resources by
# assigning roles"), no roleDefinitions/write.
WRITES = {
    "Owner": {"roleDefinitions", "roleAssignments"},  # Actions: *
    "User Access Administrator": {"roleDefinitions", "roleAssignments"},  # Authorization/*
    "Role Based Access Control Administrator": {"roleAssignments"},
    "Contributor": set(),
}


def test_no_right_to_define_the_custom_role_names_roles_that_have_it():
    """gpufleet defines its nodes' custom roles; without roleDefinitions/write the deployment
    fails there, and the fix must name a role that has it."""
    err = (
        "AuthorizationFailed: The client 'x' with object id 'y' does not have authorization to "
        "perform action 'Microsoft.Authorization/roleDefinitions/write' over scope "
        "'/subscriptions/s/resourceGroups/g/providers/Microsoft.Authorization/roleDefinitions/z'"
    )
    known = registry.explain_failure("azure", err)
    assert known is not None
    problem, fix = known
    assert "roleDefinitions/write" in problem and "Contributor" in problem
    offered = fix.split("(")[0]
    able = {role for role, writes in WRITES.items() if "roleDefinitions" in writes}
    assert all(role in offered for role in able)
    assert not [r for r in WRITES if r in offered and r not in able]


def test_the_assignment_hint_names_no_role_that_cannot_define_the_custom_role():
    """The custom role is defined before any assignment: a role that may assign but not define
    (RBAC Administrator) would only move the failure one step earlier."""
    err = "AuthorizationFailed: ... 'Microsoft.Authorization/roleAssignments/write' over scope"
    problem, fix = registry.explain_failure("azure", err) or ("", "")
    offered = fix.split("(")[0]
    able = {role for role, writes in WRITES.items() if writes >= {"roleDefinitions"}}
    assert [r for r in WRITES if r in offered and r in able] and not [
        r for r in WRITES if r in offered and r not in able
    ]


def test_a_role_definition_not_yet_propagated_says_run_again():
    """Role definitions propagate eventually: an assignment made just after its custom role can
    fail with RoleDefinitionDoesNotExist (pulumi/pulumi-azure#840, read 2026-11-25)."""
    err = "RoleDefinitionDoesNotExist: The specified role definition with ID 'z' does not exist."
    known = registry.explain_failure("azure", err)
    assert known is not None and "again" in known[1]


def test_a_nic_still_reserved_after_its_vm_says_wait_and_run_down_again():
    """ARM keeps a NIC reserved for its VM for 180 s after the VM is deleted and refuses its
    deletion with NicReservedForAnotherVm meanwhile (Azure/karpenter-provider-azure#92;
    rancher/machine#359 retries "capped at 180s total"; read 2026-11-25)."""
    err = (
        'error: Code="NicReservedForAnotherVm" Message="Nic(s) in request is reserved for '
        "another Virtual Machine for 180 seconds. Please provide another nic(s) or retry after "
        '180 seconds."'
    )
    known = registry.explain_failure("azure", err)
    assert known is not None
    problem, fix = known
    assert "180" in problem and "3 minutes" in fix and "gpufleet down" in fix
