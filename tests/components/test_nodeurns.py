"""A node's own resources in 4-node stacks of each cloud: what replacing that node replaces.

Real: each cloud's fleet component and the URNs and parents the Pulumi SDK registers.
Faked: the engine and the clouds (Pulumi mocks echo inputs, components/*/mocks.py fill in ids).
"""

from __future__ import annotations

import pytest

from gpufleet.components.nodeurns import (
    node_index,
    node_urns,
    replaced_urns,
    urn_name,
    urn_type,
)
from tests.components.stackurns import run_stack

# p5 with EFA (32 EFA interfaces; the head's own ENI with an Elastic IP) and bootstrap host
# keys (a TLS key per node); a3 in one compact placement policy; ND H100 v5 (InfiniBand) in
# one availability set + proximity placement group.
STACKS = {
    "aws": ("aws-p5", {"gpufleet:bootstrapHostKeys": "true"}),
    "gcp": ("gcp-a3", {}),
    "azure": ("azure-nd-h100", {}),
}
# What each node must own; the head also its public address (and on p5 its ENI).
NODE_TYPES = {
    "aws": {
        "aws:ec2/instance:Instance",
        "aws:ec2/launchTemplate:LaunchTemplate",
        "aws:scheduler/schedule:Schedule",
        "tls:index/privateKey:PrivateKey",
    },
    "gcp": {"gcp:compute/instance:Instance", "gcp:compute/instanceIAMMember:InstanceIAMMember"},
    "azure": {
        "azure-native:compute:VirtualMachine",
        "azure-native:network:NetworkInterface",
        "azure-native:managedidentity:UserAssignedIdentity",
        "azure-native:authorization:RoleAssignment",
        "azure-native:devtestlab:GlobalSchedule",
    },
}
HEAD_TYPES = {
    "aws": {"aws:ec2/networkInterface:NetworkInterface", "aws:ec2/eip:Eip"},
    "gcp": set(),  # the head's external IP is an access config of its instance
    "azure": {"azure-native:network:PublicIPAddress"},
}
# Shared: never a node's.
SHARED_TYPES = {
    "aws": {
        "aws:ec2/vpc:Vpc",
        "aws:ec2/subnet:Subnet",
        "aws:ec2/securityGroup:SecurityGroup",
        "aws:ec2/placementGroup:PlacementGroup",
        "aws:iam/role:Role",
    },
    "gcp": {
        "gcp:compute/network:Network",
        "gcp:compute/firewall:Firewall",
        "gcp:compute/resourcePolicy:ResourcePolicy",
        "gcp:serviceaccount/account:Account",
    },
    "azure": {
        "azure-native:resources:ResourceGroup",
        "azure-native:network:VirtualNetwork",
        "azure-native:network:NetworkSecurityGroup",
        "azure-native:compute:AvailabilitySet",
        "azure-native:compute:ProximityPlacementGroup",
    },
}


def owned(cloud: str, nodes: int, **kw):
    stack, config = STACKS[cloud]
    registered, outputs, _ = run_stack(stack, config, name="c4", nodes=nodes, **kw)
    per_node = [set(node_urns(registered, "c4", i)) for i in range(nodes)]
    return registered, per_node


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_node_1_owns_its_instance_and_its_own_resources_only(cloud):
    registered, per_node = owned(cloud, 4)
    types = {r["urn"]: r["type"] for r in registered}
    one = per_node[1]
    assert {types[u] for u in one} >= NODE_TYPES[cloud]
    assert all(urn_name(u).startswith("c4-node-1") for u in one), sorted(one)
    for other in (0, 2, 3):
        assert not one & per_node[other]
        assert {types[u] for u in per_node[other]} >= NODE_TYPES[cloud]
    assert {types[u] for u in per_node[0]} >= HEAD_TYPES[cloud]
    assert not {types[u] for u in one} & HEAD_TYPES[cloud]  # a worker has no public address
    everyone = set().union(*per_node)
    shared_types = {types[u] for u in types if u not in everyone}
    assert shared_types >= SHARED_TYPES[cloud]
    assert not {types[u] for u in everyone} & SHARED_TYPES[cloud]
    # the fleet component itself, and nothing outside it, is never a node's
    assert not any(urn_type(u).startswith("gpufleet:") for u in everyone)


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_what_no_node_owns_does_not_grow_with_the_node_count(cloud):
    """A per-node resource named outside the convention would be counted shared, and appear
    once more in the 4-node stack than in the 2-node one."""
    two, per2 = owned(cloud, 2)
    four, per4 = owned(cloud, 4)
    shared2 = sorted(urn_name(r["urn"]) for r in two if r["urn"] not in set().union(*per2))
    shared4 = sorted(urn_name(r["urn"]) for r in four if r["urn"] not in set().union(*per4))
    assert shared2 == shared4
    assert len(per4[3]) == len(per2[1])  # a worker owns as much in either


def test_azure_expiry_grants_on_each_vm_of_a_brought_group_are_that_node_s():
    """In a brought resource group the Logic App's deallocate grant is per VM,
    `<cluster>-expiry-role-<i>` (replaced with its VM: replace_with), not node-prefixed."""
    assert node_index("c4", "c4-expiry-role-2") == 2
    assert node_index("c4", "c4-expiry-role") is None
    assert node_index("c4", "c4-node-role") is None  # AWS's shared node role
    assert node_index("c4", "c4-node-12-lt") == 12
    assert node_index("c4", "c4-node-1") == 1
    assert node_index("c4-node-1", "c4-node-1-node-0") == 0


def test_a_same_named_resource_outside_the_fleet_is_not_the_node_s():
    fleet = "urn:pulumi:s::gpufleet::gpufleet:index:AwsGpuFleet::c4"
    inside = (
        "urn:pulumi:s::gpufleet::gpufleet:index:AwsGpuFleet$aws:ec2/instance:Instance::c4-node-1"
    )
    child = "urn:pulumi:s::gpufleet::gpufleet:index:AwsGpuFleet$aws:ec2/instance:Instance$x:y:Z::k"
    outside = "urn:pulumi:s::gpufleet::aws:ec2/instance:Instance::c4-node-1"
    resources = [
        {"urn": fleet, "parent": ""},
        {"urn": inside, "parent": fleet},
        {"urn": child, "parent": inside},
        {"urn": outside, "parent": ""},
        {"urn": inside, "parent": fleet, "delete": True},  # a pending delete: listed once
    ]
    assert node_urns(resources, "c4", 1) == sorted([inside, child])


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_replacing_the_head_keeps_its_interface_and_public_address(cloud):
    """The head's own ENI (delete_on_termination false) and its Elastic IP on AWS, its NIC
    (deleteOption Detach) and static public IP on Azure outlive its instance: replaced_urns
    leaves them out (they stay targeted), so its addresses stay; the instance is replaced."""
    registered, per_node = owned(cloud, 4)
    types = {r["urn"]: r["type"] for r in registered}
    nic = {"azure-native:network:NetworkInterface"} if cloud == "azure" else set()
    for i, kept_types in ((0, HEAD_TYPES[cloud] | nic), (1, nic)):
        again = set(replaced_urns(per_node[i]))
        assert f"c4-node-{i}" in {urn_name(u) for u in again}  # the instance
        assert {types[u] for u in per_node[i] - again} == kept_types
