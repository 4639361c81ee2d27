"""GCP stacks under mocks: maintenance, gVNIC, compact policy, spot + TTL, A3 NICs, labels."""

from __future__ import annotations

import importlib
import inspect

import pytest

from components.errors import SpecError
from tests.components.stackplans import assert_contract, plan, tagged_with_cluster

VM = "gcp:compute/instance:Instance"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"


@pytest.fixture(scope="module")
def a2():
    return plan("gcp-a2")


def test_every_vm_terminates_on_maintenance_and_uses_gvnic(a2):
    vms = a2.of_type(VM)
    assert len(vms) == 2
    for vm in vms:
        assert vm.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE"
        assert all(n["nicType"] == "GVNIC" for n in vm.inputs["networkInterfaces"])
        assert "guestAccelerators" not in vm.inputs  # A2 GPUs come with the machine type


def test_vms_share_one_compact_policy_without_vm_count(a2):
    (policy,) = a2.of_type(POLICY)
    gp = policy.inputs["groupPlacementPolicy"]
    assert gp["collocation"] == "COLLOCATED" and "vmCount" not in gp
    links = {vm.inputs["resourcePolicies"] for vm in a2.of_type(VM)}
    assert links == {f"https://www.googleapis.com/compute/v1/projects/p/x/{policy.name}"}


def test_spot_with_ttl_deletes_at_max_run_duration(a2):
    for vm in a2.of_type(VM):
        s = vm.inputs["scheduling"]
        assert s["provisioningModel"] == "SPOT" and s["preemptible"] is True
        assert s["instanceTerminationAction"] == "DELETE"
        assert s["maxRunDuration"]["seconds"] == 240 * 60


def test_ssh_firewall_only_from_stack_cidrs(a2):
    fws = {f.name: f for f in a2.of_type("gcp:compute/firewall:Firewall")}
    ssh = fws["gcp-a2-ssh"].inputs
    assert ssh["sourceRanges"] == ["203.0.113.0/24"] and ssh["allows"][0]["ports"] == ["22"]
    assert all("0.0.0.0/0" not in f.inputs.get("sourceRanges", []) for f in fws.values())
    assert fws["gcp-a2-internal"].inputs["allows"] == [{"protocol": "all"}]


def test_only_the_head_has_an_external_ip_and_takes_ssh_from_outside(a2):
    """An access config is what gives a GCE VM an external IPv4; without one the VM has only
    internal addresses (compute.instances networkInterfaces[].accessConfigs[], and "Configure
    a VM without an external IP": https://cloud.google.com/compute/docs/ip-addresses/
    reserve-static-external-ip-address). A firewall rule with target tags applies only to
    VMs with one of those tags (https://cloud.google.com/firewall/docs/firewalls#
    rule_assignment). Workers get neither, and take SSH from the head by the internal rule."""
    vms = {vm.name: vm for vm in a2.of_type(VM)}
    head, worker = vms["gcp-a2-node-0"], vms["gcp-a2-node-1"]
    assert head.inputs["networkInterfaces"][0]["accessConfigs"]
    assert not worker.inputs["networkInterfaces"][0].get("accessConfigs")
    fws = {f.name: f for f in a2.of_type("gcp:compute/firewall:Firewall")}
    assert fws["gcp-a2-ssh"].inputs["targetTags"] == ["gcp-a2-ssh"]
    assert "gcp-a2-ssh" in head.inputs["tags"] and "gcp-a2-ssh" not in worker.inputs["tags"]
    assert "gcp-a2" in worker.inputs["tags"]  # the internal rule's target
    assert a2.outputs["nodes"][0]["public_ip"] and a2.outputs["nodes"][1]["public_ip"] is None


def test_workers_reach_the_internet_through_cloud_nat(a2):
    """A VM without an external IP reaches the internet only through Cloud NAT, which serves
    only VMs without one (Cloud NAT overview, "specifications": https://cloud.google.com/nat/
    docs/overview): the head keeps answering SSH on its own address."""
    nat = a2.one("gcp:compute/routerNat:RouterNat")
    assert nat.inputs["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert a2.one("gcp:compute/router:Router").inputs["network"] == "gcp-a2-net-id"


def test_public_workers_gives_every_vm_an_external_ip_and_needs_no_nat():
    p = plan("gcp-a2", public_workers=True)
    assert all(vm.inputs["networkInterfaces"][0]["accessConfigs"] for vm in p.of_type(VM))
    assert not p.of_type("gcp:compute/routerNat:RouterNat")
    assert all(n["public_ip"] for n in p.outputs["nodes"])


def test_a3_has_four_gpu_nics_each_on_its_own_network():
    p = plan("gcp-a3")
    for vm in p.of_type(VM):
        nics = vm.inputs["networkInterfaces"]
        assert len(nics) == 5 and all(n["nicType"] == "GVNIC" for n in nics)
        assert len({n["network"] for n in nics}) == 5
        head = vm.name.endswith("-node-0")
        assert [bool(n.get("accessConfigs")) for n in nics] == [head] + [False] * 4
    assert len(p.of_type("gcp:compute/network:Network")) == 5
    assert p.outputs["fabric"] == "tcpx"


def test_g2_has_no_compact_policy_and_standard_provisioning():
    p = plan("gcp-g2")
    assert not p.of_type(POLICY)
    for vm in p.of_type(VM):
        assert vm.inputs["scheduling"]["provisioningModel"] == "STANDARD"
        assert vm.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE"


def test_n1_shape_attaches_its_gpu():
    p = plan("gcp-g2", instance_type="n1-standard-8+t4", nodes=1)
    (vm,) = p.of_type(VM)
    assert vm.inputs["machineType"] == "n1-standard-8"
    assert vm.inputs["guestAccelerators"] == [{"type": "nvidia-tesla-t4", "count": 1}]


def test_image_user_data_ssh_keys_and_labels(a2):
    from components.gcp.fleet import DLVM_IMAGE

    for vm in a2.of_type(VM):
        i = vm.name.rsplit("-", 1)[1]
        assert vm.inputs["bootDisk"]["initializeParams"]["image"] == DLVM_IMAGE
        md = vm.inputs["metadata"]
        assert md["user-data"].startswith("#cloud-config")
        assert f"MOCK-gcp-a2-node-{i}-host-key" in md["user-data"]
        assert md["ssh-keys"].startswith("gpufleet:ssh-ed25519 ")
        assert tagged_with_cluster(vm.inputs["labels"], "gcp-a2")


def test_contract_outputs(a2):
    assert_contract(a2, 2)


def labelable(typ: str) -> bool:
    """Whether the pulumi_gcp resource of type token `typ` takes labels."""
    module, cls = typ.split(":")[1].split("/")[0], typ.rsplit(":", 1)[1]
    res = getattr(importlib.import_module(f"pulumi_gcp.{module}"), cls)
    return "labels" in inspect.signature(res._internal_init).parameters


@pytest.mark.parametrize("stack", ["gcp-a2", "gcp-a3", "gcp-g2"])
def test_every_labelable_resource_carries_cluster_and_expiry(stack):
    p = plan(stack)
    gcp_resources = [r for r in p.resources if r.type.startswith("gcp:")]
    labelled = [r for r in gcp_resources if labelable(r.type)]
    assert labelled, "the fleet registers labelable resources"
    for r in labelled:
        assert tagged_with_cluster(r.inputs.get("labels"), stack), r.type
    for vm in p.of_type(VM):
        disk_labels = vm.inputs["bootDisk"]["initializeParams"]["labels"]
        assert tagged_with_cluster(disk_labels, stack)


def test_empty_ssh_cidrs_are_refused_not_opened_to_everyone():
    with pytest.raises(SpecError) as e:
        plan("gcp-g2", ssh_cidrs=[])
    assert e.value.field == "ssh_cidrs"


def test_region_follows_a_zone_given_alone():
    p = plan("gcp-g2", region=None, zone="europe-west4-b")
    assert {vm.inputs["zone"] for vm in p.of_type(VM)} == {"europe-west4-b"}
    subnets = p.of_type("gcp:compute/subnetwork:Subnetwork")
    assert {s.inputs["region"] for s in subnets} == {"europe-west4"}


def test_zone_outside_the_region_and_ttl_past_gce_limit_are_refused():
    with pytest.raises(SpecError) as e:
        plan("gcp-g2", region="us-central1", zone="europe-west4-b")
    assert e.value.field == "zone"
    with pytest.raises(SpecError) as e:
        plan("gcp-g2", ttl_minutes=121 * 24 * 60)
    assert e.value.field == "ttl_minutes"
