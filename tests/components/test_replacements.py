"""What a re-apply does to each resource, from two plans of one stack (issue 19, items 5, 11, 21).

The facts are stated here from the provider sources, independently of components/<cloud>/
forcenew.py (read 2026-11-25):
- AWS, hashicorp/terraform-provider-aws internal/service/ec2/ec2_launch_template.go: an update
  of the template's data creates a new version (CreateLaunchTemplateVersion, latest_version
  moves); ec2_instance.go CustomizeDiff: diff.ForceNew("launch_template.0.version") when the
  version asked for differs from the instance's. Tags are updated in place (UpdateTags).
- GCP, hashicorp/terraform-provider-google google/services/compute/resource_compute_instance.go:
  boot_disk.initialize_params (image, labels) and scheduling.termination_time are ForceNew;
  labels and metadata are set in place (setLabels, setMetadata).
- Azure, learn.microsoft.com/azure/virtual-machines/custom-data: customData cannot be changed
  on an existing VM; the image reference is fixed at creation. Pulumi replaces on such a change
  only with replace_on_changes (pulumi.com/docs/iac/concepts/options/replaceonchanges/).
"""

from __future__ import annotations

import copy

import pytest

from gpufleet.clusters.plan import plan_stack
from gpufleet.components.replacements import changed_paths, diff

AWS_LT = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_VM = "aws:ec2/instance:Instance"
GCP_VM = "gcp:compute/instance:Instance"
AZ_VM = "azure-native:compute:VirtualMachine"

# (resource type, input path changed, what the provider does) - from the sources above.
FACTS = [
    (AWS_LT, "userData", "update"),  # a new version, the resource itself stays
    (AWS_LT, "imageId", "update"),
    (AWS_VM, "tags", "update"),
    (AWS_VM, "launchTemplate.version", "replace"),
    (GCP_VM, "scheduling.terminationTime", "replace"),
    (GCP_VM, "bootDisk.initializeParams.labels", "replace"),
    (GCP_VM, "bootDisk.initializeParams.image", "replace"),
    (GCP_VM, "labels", "update"),
    (GCP_VM, "metadata", "update"),
    (AZ_VM, "osProfile.customData", "refused"),  # no replace_on_changes: ARM answers 409
    (AZ_VM, "storageProfile.imageReference", "refused"),
    (AZ_VM, "tags", "update"),
]

# GCP instance fields that change only by stopping the VM, from
# https://github.com/hashicorp/terraform-provider-google/blob/main/google/services/compute/
# resource_compute_instance.go (read 2026-11-25): the update refuses them unless
# allow_stopping_for_update is true ("Changing the machine_type, min_cpu_platform,
# service_account, enable_display, shielded_instance_config, scheduling.node_affinities,
# scheduling.max_run_duration or network_interface.[#d].(network/subnetwork/subnetwork_project)
# or advanced_machine_features on a started instance requires stopping it"); the nodes set it
# false. In the same file network_interface's items: nic_type and queue_count ForceNew,
# access_config (no ForceNew) updated in place. Pulumi input names (camelCase).
GCP_STOP_TO_CHANGE = [
    "machineType",
    "serviceAccount.email",
    "minCpuPlatform",
    "shieldedInstanceConfig.enableSecureBoot",
    "enableDisplay",
    "advancedMachineFeatures.threadsPerCore",
    "scheduling.nodeAffinities",
    "scheduling.maxRunDuration.seconds",
]
GCP_NIC = [  # one item of networkInterfaces changed: (its input, what the provider does)
    ("network", "refused"),
    ("subnetwork", "refused"),
    ("subnetworkProject", "refused"),
    ("nicType", "replace"),
    ("queueCount", "replace"),
    ("accessConfigs", "update"),
]


def resource(typ: str, name: str, inputs: dict, **extra) -> dict:
    return {"type": typ, "name": name, "inputs": inputs, **extra}


def set_path(inputs: dict, path: str, value: object) -> dict:
    out = copy.deepcopy(inputs)
    d = out
    *parents, last = path.split(".")
    for p in parents:
        d = d.setdefault(p, {})
    d[last] = value
    return out


@pytest.mark.parametrize(("typ", "path", "action"), FACTS)
def test_a_changed_input_does_what_the_provider_does(typ, path, action):
    before = resource(typ, "c-node-0", set_path({}, path, "old"))
    after = resource(typ, "c-node-0", set_path({}, path, "new"))
    (change,) = diff([before], [after])
    assert (change.action, change.paths) == (action, (path,))


@pytest.mark.parametrize("path", GCP_STOP_TO_CHANGE)
def test_gcp_a_field_that_needs_a_stopped_vm_is_refused_not_updated(path):
    before = resource(GCP_VM, "c-node-0", set_path({}, path, "old"))
    after = resource(GCP_VM, "c-node-0", set_path({}, path, "new"))
    (change,) = diff([before], [after])
    assert (change.action, change.node) == ("refused", 0)
    assert "allow_stopping_for_update" in change.reason and "re-create" in change.reason
    assert "replace_on_changes" not in change.reason  # not the fix on GCP


@pytest.mark.parametrize(("field", "action"), GCP_NIC)
def test_gcp_network_interface_items(field, action):
    nics = [{"network": "n", "subnetwork": "s", "nicType": "GVNIC", "accessConfigs": []}]
    new = copy.deepcopy(nics)
    new[0][field] = "other"
    (change,) = diff(
        [resource(GCP_VM, "c-node-0", {"networkInterfaces": nics})],
        [resource(GCP_VM, "c-node-0", {"networkInterfaces": new})],
    )
    assert change.action == action


def test_gcp_another_network_interface_replaces_the_vm():
    one = [{"network": "n", "nicType": "GVNIC"}]
    (change,) = diff(
        [resource(GCP_VM, "c-node-0", {"networkInterfaces": one})],
        [resource(GCP_VM, "c-node-0", {"networkInterfaces": one + one})],
    )
    assert change.action == "replace"


def test_aws_new_user_data_makes_a_new_version_which_replaces_the_instance():
    """The subtlety: the instance asks for the template's latest version, whose number does
    not change in either plan (the mock says 1); the template's change moves it."""
    lt = resource(AWS_LT, "c-node-0-lt", {"userData": "v1"})
    vm = resource(AWS_VM, "c-node-0", {"launchTemplate": {"id": "c-node-0-lt-id", "version": "1"}})
    changes = diff([lt, vm], [{**lt, "inputs": {"userData": "v2"}}, vm])
    by_name = {c.name: c for c in changes}
    assert by_name["c-node-0-lt"].action == "update"
    node = by_name["c-node-0"]
    assert (node.action, node.node, node.forcing) == ("replace", 0, ("launchTemplate.version",))
    assert "user data changed" in node.reason and "new launch template version" in node.reason
    assert node.line().startswith("node 0: replaced (launch template user data changed")


def test_aws_template_tags_alone_make_no_new_version_and_replace_no_instance():
    """terraform-provider-aws ec2_launch_template.go (read 2026-11-25): an update of `tags` /
    `tags_all` alone goes through UpdateTags, not CreateLaunchTemplateVersion."""
    lt = resource(AWS_LT, "c-node-0-lt", {"userData": "v1", "tags": {"e": "1"}})
    vm = resource(AWS_VM, "c-node-0", {"launchTemplate": {"id": "c-node-0-lt-id", "version": "1"}})
    changes = diff([lt, vm], [{**lt, "inputs": {"userData": "v1", "tags": {"e": "2"}}}, vm])
    assert [(c.name, c.action) for c in changes] == [("c-node-0-lt", "update")]
    assert "new launch template version" not in changes[0].reason


def test_azure_replaces_when_the_vm_lists_the_input_in_replace_on_changes():
    old = resource(AZ_VM, "c-node-1", {"osProfile": {"customData": "a"}})
    new = resource(
        AZ_VM,
        "c-node-1",
        {"osProfile": {"customData": "b"}},
        replace_on_changes=["osProfile.customData"],
        delete_before_replace=True,
    )
    (change,) = diff([old], [new])
    assert (change.action, change.order) == ("replace", "delete-then-create")


def test_created_and_deleted_resources():
    a, b = resource(GCP_VM, "c-node-0", {}), resource(GCP_VM, "c-node-1", {})
    assert [(c.action, c.node) for c in diff([a], [a, b])] == [("create", 1)]
    assert [(c.action, c.node) for c in diff([a, b], [a])] == [("delete", 1)]
    assert diff([a, b], [a, b]) == []


def test_changed_paths_name_list_items_and_missing_keys():
    old = {"a": [{"x": 1}, {"x": 2}], "b": {"c": 1}, "gone": 1}
    new = {"a": [{"x": 1}, {"x": 3}], "b": {"c": 1, "d": 2}}
    assert changed_paths(old, new) == ["a[1].x", "b.d", "gone"]


STACKS = ["aws-p5", "gcp-a3", "azure-nd-h100"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_ttl_change_reports_every_node_alike(stack):
    """What it does comes from the plans (tests/golden/plan/ has today's text): every node
    changes the same way, and a node whose inputs (or template) changed is never left out."""
    old = plan_stack(stack)
    new = plan_stack(stack, overrides={"ttl_minutes": 120})
    changes = diff(old["resources"], new["resources"])
    nodes = {c.node: c.action for c in changes if c.node is not None}
    assert len(set(nodes.values())) <= 1
    assert set(nodes) in (set(), set(range(old["nodes"])))


@pytest.mark.parametrize("stack", STACKS)
def test_an_unchanged_stack_changes_nothing(stack):
    doc = plan_stack(stack)
    assert diff(doc["resources"], doc["resources"]) == []
