"""Azure nodes' AcrPull on the image's registry under Pulumi mocks, and the refusals.

Faked: ARM (Pulumi mocks, components/azure/mocks.py); real: the resources and inputs the fleet
program registers, and their ordering (dependencies).
"""

from __future__ import annotations

import pytest

from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.errors import SpecError
from tests.components.stackplans import plan, refused_before_anything

VM = "azure-native:compute:VirtualMachine"
ASSIGNMENT = "azure-native:authorization:RoleAssignment"
SUB = "00000000-1111-2222-3333-444444444444"
REGISTRY = (
    f"/subscriptions/{SUB}/resourceGroups/images/providers/"
    "Microsoft.ContainerRegistry/registries/teamreg"
)
IMAGE = "teamreg.azurecr.io/train:v1"

# Written from these, read 2026-11-25:
# https://azure-rbac-catalog.org/roles/7f951dda-4ed3-4680-a7ca-43fe172d538d/acrpull (the raw
#   role definition as Azure returns it): "roleName": "AcrPull", "type": "BuiltInRole",
#   "actions": ["Microsoft.ContainerRegistry/registries/pull/read"],
#   "id": "/providers/Microsoft.Authorization/roleDefinitions/7f951dda-4ed3-4680-a7ca-43fe172d538d"
# https://learn.microsoft.com/azure/container-registry/container-registry-roles (managed
#   identities are assignable ACR roles; pull-only identities get the pull role)
ACRPULL_ID = "7f951dda-4ed3-4680-a7ca-43fe172d538d"


def acr_pulls(p):
    return [r for r in p.of_type(ASSIGNMENT) if r.name.endswith("-acr-pull")]


@pytest.fixture(scope="module")
def acr():
    return plan("azure-nd-a100", container=ContainerSpec(image=IMAGE, registry_id=REGISTRY))


def test_each_node_identity_gets_acrpull_on_the_registry_before_its_vm(acr):
    pulls = acr_pulls(acr)
    vms = acr.of_type(VM)
    assert len(pulls) == len(vms) == 2
    for vm in vms:
        (a,) = [r for r in pulls if r.name == f"{vm.name}-acr-pull"]
        print(a.name, a.inputs["scope"], a.inputs["roleDefinitionId"])
        assert a.inputs["scope"] == REGISTRY
        assert a.inputs["roleDefinitionId"] == (
            f"/subscriptions/{SUB}/providers/Microsoft.Authorization/roleDefinitions/{ACRPULL_ID}"
        )
        # the node's own identity, and the VM waits for the grant (its boot pull needs it)
        assert a.inputs["principalId"] == f"principal-{vm.name}-id"
        assert a.inputs["principalType"] == "ServicePrincipal"
        assert a.name in vm.depends_on


@pytest.mark.parametrize(
    "container", [None, ContainerSpec(image="nvcr.io/nvidia/pytorch:25.01-py3")]
)
def test_no_acrpull_without_an_acr_image(container):
    assert acr_pulls(plan("azure-nd-a100", container=container)) == []


def test_acr_image_without_registry_id_is_refused_before_anything():
    err, registered = refused_before_anything("azure-nd-a100", container=ContainerSpec(image=IMAGE))
    print("refusal:", err, "| fix:", err.hint)
    assert err.field == "container.registry_id" and "az acr show -n teamreg" in err.hint
    assert registered == []


def test_registry_id_of_another_registry_is_refused():
    other = REGISTRY.replace("teamreg", "otherreg")
    err, registered = refused_before_anything(
        "azure-nd-a100", container=ContainerSpec(image=IMAGE, registry_id=other)
    )
    assert err.field == "container.registry_id" and "otherreg" in str(err)
    assert registered == []


def test_ecr_image_is_refused_before_anything():
    err, registered = refused_before_anything(
        "azure-nd-a100",
        container=ContainerSpec(image="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"),
    )
    assert err.field == "container.image" and "ECR" in str(err)
    assert registered == []


@pytest.mark.parametrize(
    ("image", "rid"),
    [
        ("python:3.12", REGISTRY),  # the id is for an ACR image only
        (IMAGE, "/subscriptions/x/resourceGroups/g"),  # not a registry's id
    ],
)
def test_registry_id_is_checked_in_the_spec(image, rid):
    with pytest.raises(SpecError) as e:
        ContainerSpec(image=image, registry_id=rid)
    assert e.value.field == "container.registry_id"
