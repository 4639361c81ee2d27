"""Editing an Azure cluster's `tags` updates every resource in place: no node is replaced.

Facts (read 2026-11-25):
- learn.microsoft.com/rest/api/resources/tags/updateatscope: ARM replaces or merges the tags of
  any existing resource (PATCH {scope}/providers/Microsoft.Resources/tags/default), and every
  resource's own PUT/PATCH takes `tags` on an existing resource.
- learn.microsoft.com/azure/virtual-machines/custom-data: custom data is fixed at creation: a
  tag must never reach it (the VM would be refused or replaced).
- pulumi-azure-native replaces a resource on a change of its ARM URL's path parameters only
  (resourceGroupName, the resource's own name); `tags` is a body property.
"""

from __future__ import annotations

from gpufleet.clusters.plan import plan_stack
from gpufleet.components.replacements import diff

STACK = "azure-nd-a100"
# Where each Azure resource type carries tags, and what a change of them does (the sources
# above): a body property updated in place on every type gpufleet tags.
TAGS_UPDATE_IN_PLACE = {
    "azure-native:compute:VirtualMachine": "update",
    "azure-native:network:NetworkInterface": "update",
    "azure-native:network:PublicIPAddress": "update",
    "azure-native:network:NetworkSecurityGroup": "update",
    "azure-native:network:ApplicationSecurityGroup": "update",
    "azure-native:network:VirtualNetwork": "update",
    "azure-native:network:NatGateway": "update",
    "azure-native:resources:ResourceGroup": "update",
    "azure-native:compute:AvailabilitySet": "update",
    "azure-native:compute:ProximityPlacementGroup": "update",
    "azure-native:managedidentity:UserAssignedIdentity": "update",
    "azure-native:devtestlab:GlobalSchedule": "update",
    "azure-native:logic:Workflow": "update",
}


def test_a_tag_change_is_an_in_place_update_of_every_tagged_resource_and_replaces_no_node():
    old = plan_stack(STACK, overrides={"tags": {"team": "a"}})
    new = plan_stack(STACK, overrides={"tags": {"team": "b"}})
    changes = [c.as_dict() for c in diff(old["resources"], new["resources"])]
    carrying = {
        (r["type"], r["name"])
        for r in old["resources"]
        if (r["inputs"].get("tags") or {}).get("team") == "a"
    }
    assert any(t == "azure-native:compute:VirtualMachine" for t, _ in carrying)
    # Every resource carrying the user's tags changed, and nothing else did.
    assert {(c["type"], c["name"]) for c in changes} == carrying
    for c in changes:
        assert c["paths"] == ["tags.team"], c
        assert c["action"] == TAGS_UPDATE_IN_PLACE[c["type"]], c
    nodes = [c for c in changes if c["node"] is not None]
    assert len(nodes) == 2 and {c["action"] for c in nodes} == {"update"}


def test_a_tag_never_reaches_the_nodes_custom_data():
    doc = plan_stack(STACK, overrides={"tags": {"team": "marker-7f3a"}})
    vms = [r for r in doc["resources"] if r["type"] == "azure-native:compute:VirtualMachine"]
    assert vms
    for vm in vms:
        assert "marker-7f3a" not in str(vm["inputs"]["osProfile"])
        assert vm["inputs"]["tags"]["team"] == "marker-7f3a"
