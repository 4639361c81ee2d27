"""A network the user brings, possibly a Shared VPC's (review of issue 20, items 5, 6, 12):
gpufleet's two firewall rules go to the network's project, can be left to the network's owner
(`firewall_rules=False`), target a tag of gpufleet's rather than the bare cluster name, and a
network and subnet of two projects are refused before anything is registered.

Sources (read 2026-11-25):
- Firewall rules belong to one network and are created in its project; on a Shared VPC the host
  project's Network and Security Admins manage them (https://cloud.google.com/vpc/docs/
  shared-vpc, "Network and Security Admins"; REST firewalls.insert is
  `POST .../projects/{project}/global/firewalls`, https://cloud.google.com/compute/docs/
  reference/rest/v1/firewalls/insert).
- Cluster Toolkit takes the rules' project from the subnetwork when none is given
  (GoogleCloudPlatform/cluster-toolkit modules/network/firewall-rules/main.tf:
  `derived_project_id = ...google_compute_subnetwork.subnetwork[0].project`).
- Any principal who can edit an instance can set its network tags; Google recommends service
  accounts where that matters (https://cloud.google.com/firewall/docs/firewalls, "Filtering by
  service account versus network tag"). A rule cannot mix targetServiceAccounts with
  targetTags or sourceTags (REST Firewall.targetServiceAccounts).
- Network tags: RFC 1035, 1-63 characters, lowercase letters, digits, dashes
  (https://cloud.google.com/vpc/docs/add-remove-network-tags).
"""

from __future__ import annotations

import re

import pulumi
import pulumi_gcp as gcp
import pytest

from gpufleet.components.errors import SpecError
from gpufleet.components.gcp import GcpGpuFleet
from gpufleet.components.preview import Plan, evaluate
from gpufleet.components.validators import AccountError
from tests.components.gcp.test_byo_network import SSH, _cause, account

FIREWALL = "gcp:compute/firewall:Firewall"
VM = "gcp:compute/instance:Instance"
HOST_NET = "projects/host-proj/global/networks/shared"
HOST_SUB = "projects/host-proj/regions/europe-west4/subnetworks/shared-eu"
# GCE's network tag form (add-remove-network-tags), written here from the page
TAG_FORM = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


def fleet(
    vpc_id, subnet_id, *, with_account=True, stack="plan", **args
) -> tuple[Plan, GcpGpuFleet]:
    """The fleet on a provider of service project team-proj; the ids are plain strings or
    functions of the program's own network and subnet (Outputs)."""
    built: list = []

    def program():
        eu = gcp.Provider("eu", project="team-proj", region="europe-west4")
        on_eu = pulumi.ResourceOptions(provider=eu)
        net = gcp.compute.Network("mine", auto_create_subnetworks=False, opts=on_eu)
        sub = gcp.compute.Subnetwork(
            "mine-sub", network=net.id, ip_cidr_range="10.9.0.0/20", opts=on_eu
        )
        vpc = vpc_id(net) if callable(vpc_id) else vpc_id
        subnet = subnet_id(sub) if callable(subnet_id) else subnet_id
        fleet_args = {
            "instance_type": "a2-highgpu-8g",
            "nodes": 2,
            "public_workers": True,  # no Cloud NAT to check
            "ssh_cidrs": SSH,
            "vpc_id": vpc,
            "subnet_id": subnet,
            **args,
        }
        built.append(GcpGpuFleet("train", fleet_args, opts=on_eu))

    plan = evaluate(program, account=account() if with_account else None, stack=stack)
    return plan, built[0]


def rules(plan: Plan) -> dict:
    return {r.name: r for r in plan.of_type(FIREWALL) if r.parent == "train"}


def check(f: GcpGpuFleet, words: str):
    return next(c for c in f.checks if words in c.fact)


# item 5: the rules go to the network's project


def test_rules_on_a_shared_vpc_go_to_the_host_project_its_plain_ids_name():
    plan, f = fleet(HOST_NET, HOST_SUB)
    found = rules(plan)
    print({n: (r.inputs.get("project"), r.inputs["network"]) for n, r in found.items()})
    assert set(found) == {"train-ssh", "train-internal"}
    assert {r.inputs.get("project") for r in found.values()} == {"host-proj"}
    c = check(f, "firewall rules go")
    print(c.status, c.detail)
    # Nothing answers whether the caller may create rules in host-proj: skipped, saying so.
    assert c.status == "skipped"
    assert "compute.firewalls.create" in c.detail and "host-proj" in c.detail
    assert "firewall_rules: false" in c.detail and "testIamPermissions" in c.detail


@pytest.mark.parametrize(
    "vpc_id, subnet_id",
    [
        # a self link of the program's own network (an Output): the project from it
        (
            lambda n: n.id.apply(
                lambda i: (
                    f"https://www.googleapis.com/compute/v1/projects/host-proj/global/networks/{i}"
                )
            ),
            lambda s: s.id,
        ),
        # a bare network name, the subnet's path names the project (as Cluster Toolkit derives)
        (lambda n: n.name, lambda s: s.id.apply(lambda i: f"{HOST_SUB.rsplit('/', 1)[0]}/{i}")),
    ],
    ids=["network-self-link", "subnet-path"],
)
def test_rules_take_the_host_project_from_output_ids_when_they_resolve(vpc_id, subnet_id):
    plan, f = fleet(vpc_id, subnet_id)
    found = rules(plan)
    print({n: r.inputs.get("project") for n, r in found.items()})
    assert {r.inputs.get("project") for r in found.values()} == {"host-proj"}
    c = check(f, "firewall rules go")
    assert c.status == "skipped" and "Outputs" in c.detail
    assert "compute.firewalls.create" in c.detail


def test_rules_on_a_network_of_the_providers_project_pass_the_check():
    sub = "projects/team-proj/regions/europe-west4/subnetworks/s"
    plan, f = fleet("projects/team-proj/global/networks/n", sub)
    assert {r.inputs.get("project") for r in rules(plan).values()} == {"team-proj"}
    c = check(f, "firewall rules go")
    assert c.status == "passed" and "team-proj" in c.detail


def test_bare_ids_leave_the_rules_in_the_providers_project():
    plan, _ = fleet("n", "s", with_account=False)
    assert all("project" not in r.inputs for r in rules(plan).values())


def test_firewall_rules_false_adds_no_rule_to_the_users_network():
    """The network's owner makes the rules: gpufleet adds none, and the nodes still carry the
    tags those rules must target (the plan shows them)."""
    plan, f = fleet(HOST_NET, HOST_SUB, firewall_rules=False)
    assert not rules(plan)
    assert not plan.of_type(FIREWALL)
    node = brought_tag(plan)
    head, worker = sorted(plan.of_type(VM), key=lambda v: v.name)
    assert head.inputs["tags"] == [node, f"{node}-ssh"] and node in worker.inputs["tags"]
    c = check(f, "firewall rules go")
    assert c.status == "passed" and "adds no rule" in c.detail


def brought_tag(plan: Plan) -> str:
    (vm, *_) = plan.of_type(VM)
    return vm.inputs["tags"][0]


def test_firewall_rules_false_without_a_network_is_refused():
    def program():
        GcpGpuFleet("train", {"instance_type": "a2-highgpu-8g", "firewall_rules": False})

    with pytest.raises(Exception) as caught:
        evaluate(program)
    err = _cause(caught.value, SpecError)
    print(err)
    assert err.field == "firewall_rules" and "vpc_id" in err.hint


def test_firewall_rules_as_an_output_is_refused():
    with pytest.raises(Exception) as caught:
        fleet(HOST_NET, HOST_SUB, with_account=False, firewall_rules=pulumi.Output.from_input(True))
    assert _cause(caught.value, SpecError).field == "firewall_rules"


# item 6: the rules on a brought network target gpufleet's own tags


def test_rules_on_a_brought_network_target_a_gpufleet_tag_not_the_bare_cluster_name():
    plan, _ = fleet(HOST_NET, HOST_SUB, with_account=False)
    found = rules(plan)
    print({n: (r.inputs.get("sourceTags"), r.inputs["targetTags"]) for n, r in found.items()})
    (node,) = found["train-internal"].inputs["targetTags"]
    assert re.fullmatch(r"gpufleet-train-[0-9a-f]{8}", node), node
    assert found["train-internal"].inputs["sourceTags"] == [node]
    assert found["train-ssh"].inputs["targetTags"] == [f"{node}-ssh"]
    for vm in plan.of_type(VM):
        assert "train" not in vm.inputs["tags"] and node in vm.inputs["tags"]
        assert all(TAG_FORM.fullmatch(t) for t in vm.inputs["tags"])


def test_the_brought_tag_is_fixed_for_a_stack_and_differs_between_stacks():
    first = brought_tag(fleet(HOST_NET, HOST_SUB, with_account=False)[0])
    again = brought_tag(fleet(HOST_NET, HOST_SUB, with_account=False)[0])
    other = brought_tag(fleet(HOST_NET, HOST_SUB, with_account=False, stack="other")[0])
    assert first == again and first != other


def test_the_longest_cluster_name_gives_a_tag_gce_takes():
    from gpufleet.components.gcp.network import brought_tags

    name = "a" * 32  # the longest ClusterSpec name

    def program():
        tags = brought_tags(name)
        assert TAG_FORM.fullmatch(tags.ssh) and len(tags.ssh) <= 63, tags

    evaluate(program)


def test_the_clusters_own_network_keeps_its_bare_tags():
    """No other VM is on a network gpufleet built: existing stacks keep their tags."""

    def program():
        GcpGpuFleet("train", {"instance_type": "a2-highgpu-8g", "nodes": 2, "ssh_cidrs": SSH})

    plan = evaluate(program)
    found = rules(plan)
    assert found["train-ssh"].inputs["targetTags"] == ["train-ssh"]
    assert found["train-internal"].inputs["targetTags"] == ["train"]
    assert all("project" not in r.inputs for r in found.values())
    tags = sorted(tuple(vm.inputs["tags"]) for vm in plan.of_type(VM))
    assert tags == [("train",), ("train", "train-ssh")]


# item 12: a network and subnet of two projects


def test_a_network_and_subnet_naming_two_projects_are_refused_before_anything():
    with pytest.raises(Exception) as caught:
        fleet("projects/other/global/networks/shared", HOST_SUB, with_account=False)
    err = _cause(caught.value, SpecError)
    print(err, "| fix:", err.hint)
    assert err.field == "vpc_id" and "other" in err.problem and "host-proj" in err.problem
    assert "projects/host-proj/global/networks/shared" in err.hint


def test_a_bare_network_name_with_a_host_projects_subnet_is_refused():
    with pytest.raises(Exception) as caught:
        fleet("shared", HOST_SUB)
    err = _cause(caught.value, AccountError)
    print(err, "| fix:", err.hint)
    assert "team-proj" in err.problem and "host-proj" in err.problem
    assert err.fix == "give vpc_id as projects/host-proj/global/networks/shared"


def test_a_bare_network_name_with_a_subnet_of_the_providers_project_is_taken():
    plan, f = fleet("shared", "projects/team-proj/regions/europe-west4/subnetworks/s")
    assert check(f, "firewall rules go").status == "passed"
    assert {r.inputs.get("project") for r in rules(plan).values()} == {"team-proj"}
