"""Fleets in a resource group the user brings: tenant-unique role names, nothing on the group.

Azure facts the tests state (read 2026-11-25):
- learn.microsoft.com/azure/role-based-access-control/custom-roles ("Custom role properties"):
  a custom role's name "Must be unique to your tenant ... Maximum number of characters is 128";
  a second definition with a taken name is refused, RoleDefinitionWithSameNameExists "A role
  definition cannot be updated with a name that already exists" (Azure/ARO-RP pull 1346,
  MicrosoftDocs/azure-docs issue 60446).
- learn.microsoft.com/azure/role-based-access-control/scope-overview: a role assignment on a
  resource group applies to every resource in it; one on a resource, to that resource only.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as az
import pytest

from gpufleet.components.azure import AzureGpuFleet
from gpufleet.components.preview import Plan, evaluate

SUB = "11111111-2222-3333-4444-555555555555"
SIZE = "Standard_ND96isr_H100_v5"
EXPIRES = 1_900_000_000
GROUP = "shared"
GROUP_ID = f"/subscriptions/{SUB}/resourceGroups/{GROUP}"
SUBNET = f"{GROUP_ID}/providers/Microsoft.Network/virtualNetworks/v/subnets/s"
TENANT_NAME_MAX = 128  # the custom-roles page above
DEFINITION = "azure-native:authorization:RoleDefinition"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"


def fleets(names: list[str], group: str | None = GROUP, **extra: Any):
    """One program, one provider, the fleets `names` in the user's group `group` (None: each
    in a group of its own)."""

    def run() -> dict[str, Any]:
        prov = az.Provider("sub", location="westus3", subscription_id=SUB)
        for name in names:
            args: dict[str, Any] = {
                "nodes": 2,
                "instance_type": SIZE,
                "expires_at": EXPIRES,
                "ssh_cidrs": ["203.0.113.0/24"],
                "subnet_id": SUBNET,
                **extra,
            }
            if group is not None:
                args["resource_group_name"] = group
            AzureGpuFleet(name, args, pulumi.ResourceOptions(provider=prov))
        return {}

    return run


def role_names(p: Plan) -> dict[str, str]:
    return {r.name: r.inputs["roleName"] for r in p.of_type(DEFINITION)}


def test_two_fleets_in_one_brought_group_define_roles_of_distinct_names():
    # a TTL past a day: the Logic App backstop needs the deallocate role too
    p = evaluate(fleets(["train", "eval"], ttl_minutes=48 * 60))
    names = role_names(p)
    print("\n" + "\n".join(f"{k}: {v}" for k, v in sorted(names.items())))
    assert len(names) == 4
    assert len(set(names.values())) == 4, names
    assert all(len(n) <= TENANT_NAME_MAX for n in names.values())
    # each says which cluster it serves
    assert "train" in names["train-node-role"] and "eval" in names["eval-node-role"]


def test_the_same_fleet_in_another_stack_or_group_names_its_roles_apart():
    one = role_names(evaluate(fleets(["train"]), stack="one"))
    again = role_names(evaluate(fleets(["train"]), stack="one"))
    two = role_names(evaluate(fleets(["train"]), stack="two"))
    other = role_names(evaluate(fleets(["train"], group="other")))
    assert one == again  # stable: no diff on the next preview
    assert not set(one.values()) & set(two.values())
    assert not set(one.values()) & set(other.values())


def test_a_long_cluster_name_keeps_the_role_name_within_the_tenant_limit():
    names = role_names(evaluate(fleets(["c" * 32])))  # the longest cluster name
    assert names and all(len(n) <= TENANT_NAME_MAX for n in names.values())


def test_in_a_group_of_its_own_the_role_names_are_unchanged():
    """Existing stacks keep their roles: the name is still the (autonamed) group's."""
    p = evaluate(fleets(["train"], group=None))
    (rg,) = p.of_type("azure-native:resources:ResourceGroup")
    assert role_names(p) == {
        "train-node-role": f"gpufleet node self-delete ({rg.name})",
        "train-deallocate-role": f"gpufleet node deallocate ({rg.name})",
    }


def cluster_scopes(p: Plan) -> set[str]:
    """Ids of what the fleets made (mock ids are '<name>-id') and their VMs' OS disks."""
    made = {f"{r.name}-id" for r in p.resources if not r.type.startswith("pulumi:")}
    disks = {
        f"{GROUP_ID}/providers/Microsoft.Compute/disks/{vm.inputs['vmName']}-osdisk"
        for vm in p.of_type("azure-native:compute:VirtualMachine")
    }
    return made | disks


@pytest.mark.parametrize("ttl_hours", [4, 48])  # the daily schedule; the Logic App backstop
def test_in_a_brought_group_every_role_assignment_is_on_a_cluster_resource(ttl_hours):
    p = evaluate(fleets(["train", "eval"], ttl_minutes=ttl_hours * 60))
    assignments = p.of_type(ASSIGNMENT)
    scopes = {r.name: r.inputs["scope"] for r in assignments}
    print("\n" + "\n".join(f"{k}: {v}" for k, v in sorted(scopes.items())))
    assert GROUP_ID not in scopes.values()
    mine = cluster_scopes(p)
    assert all(s in mine for s in scopes.values()), {
        k: s for k, s in scopes.items() if s not in mine
    }


def test_in_a_brought_group_the_logic_app_may_deallocate_each_vm_and_nothing_else():
    p = evaluate(fleets(["train"], ttl_minutes=48 * 60))
    (flow,) = p.of_type("azure-native:logic:Workflow")
    grants = [
        r for r in p.of_type(ASSIGNMENT) if r.inputs["principalId"] == f"principal-{flow.name}"
    ]
    vms = {f"{vm.name}-id" for vm in p.of_type("azure-native:compute:VirtualMachine")}
    assert sorted(r.inputs["scope"] for r in grants) == sorted(vms)
    assert {r.inputs["roleDefinitionId"] for r in grants} == {"train-deallocate-role-id"}
    for r in grants:  # made again, first deleted, with a replaced VM (the same scope)
        assert r.delete_before_replace


def test_a_short_ttl_in_a_brought_group_defines_no_unused_deallocate_role():
    names = role_names(evaluate(fleets(["train"], ttl_minutes=4 * 60)))
    assert list(names) == ["train-node-role"]
