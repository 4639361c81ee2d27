"""GCP stacks under mocks: maintenance, gVNIC, compact policy, spot + TTL, A3 NICs, labels."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

from gpufleet.components.errors import SpecError
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


@pytest.mark.parametrize("stack", ["gcp-a2", "gcp-g2"])  # spot and standard
def test_ttl_is_an_absolute_termination_time_that_deletes(stack):
    """GCE's max_run_duration counts from RUNNING and "the termination timestamp is
    automatically cleared whenever a VM is stopped or suspended"; terminationTime is an absolute
    time, and instanceTerminationAction=DELETE deletes rather than stops
    (cloud.google.com/compute/docs/instances/limit-vm-runtime). The expiry is therefore the
    absolute time, with DELETE, on spot and standard VMs alike."""
    for vm in plan(stack).of_type(VM):
        s = vm.inputs["scheduling"]
        assert s["terminationTime"] == "2030-03-17T17:46:40Z"  # expires_at 1_900_000_000
        assert s["instanceTerminationAction"] == "DELETE"
        assert "maxRunDuration" not in s
        assert s["provisioningModel"] == ("SPOT" if stack == "gcp-a2" else "STANDARD")


@pytest.mark.parametrize("stack", ["gcp-a2", "gcp-g2"])  # spot and standard
def test_a_standard_vm_stopped_by_a_host_event_comes_back_so_its_expiry_still_deletes(stack):
    """GPU VMs cannot live-migrate (onHostMaintenance TERMINATE), so a host maintenance event or
    host error stops them; with automaticRestart false a standard VM then stays TERMINATED, and
    "the termination timestamp is automatically cleared whenever a VM is stopped"
    (cloud.google.com/compute/docs/instances/limit-vm-runtime; instances/host-maintenance-
    overview: automaticRestart restarts a VM terminated by a host event). A standard VM must
    restart so its terminationTime still deletes it; a Spot VM may not set automaticRestart
    (provider: "preemptible instances cannot be automatically restarted")."""
    for vm in plan(stack).of_type(VM):
        s = vm.inputs["scheduling"]
        assert s["onHostMaintenance"] == "TERMINATE"
        assert s["automaticRestart"] is (stack == "gcp-g2")


def test_ssh_firewall_only_from_stack_cidrs(a2):
    fws = {f.name: f for f in a2.of_type("gcp:compute/firewall:Firewall")}
    ssh = fws["gcp-a2-ssh"].inputs
    assert ssh["sourceRanges"] == ["203.0.113.0/24"] and ssh["allows"][0]["ports"] == ["22"]
    assert all("0.0.0.0/0" not in f.inputs.get("sourceRanges", []) for f in fws.values())
    assert fws["gcp-a2-internal"].inputs["allows"] == [{"protocol": "all"}]


def test_guest_agent_makes_and_publishes_the_host_keys(a2):
    """Without a bootstrap key google-guest-agent's own keys are the node's: with set_host_keys
    (default true) it generates them on a new instance id and writes each public key to guest
    attributes hostkeys/<type> (guest-agent instance_setup.go generateSSHKeys), which it can only
    with metadata enable-guest-attributes TRUE (compute/docs/metadata/manage-guest-attributes).
    The agent runs Before=sshd.service and after network-online.target, so after cloud-init's
    ssh module: its keys are the ones sshd serves. The bootstrap path's set_host_keys=false
    (tests/components/test_host_key_channels.py) would stop both."""
    import yaml

    for vm in a2.of_type(VM):
        assert vm.inputs["metadata"]["enable-guest-attributes"] == "TRUE"
        doc = yaml.safe_load(vm.inputs["metadata"]["user-data"])
        files = {f["path"]: f["content"] for f in doc["write_files"]}
        cfg = files["/etc/default/instance_configs.cfg"]  # whatever the image's .distro says
        assert cfg.splitlines() == ["[InstanceSetup]", "set_host_keys = true"]


def test_a3_is_refused_on_the_stock_image_naming_what_is_missing():
    """On the stock Deep Learning VM image GPUDirect-TCPX's receive daemon cannot work: it needs
    the linux-gcp-tcpx kernel or COS (TCPXO: the import-helper module and /dev/aperture_devices),
    as Cluster Toolkit's a3-highgpu / a3-megagpu blueprints provide; with NCCL_NET forced every
    NCCL job fails. gpufleet refuses that combination before anything is created."""
    for itype, missing in (("a3-highgpu-8g", "linux-gcp-tcpx"), ("a3-megagpu-8g", "import-helper")):
        with pytest.raises(SpecError) as e:
            plan("gcp-a3", instance_type=itype, image=None, zone="us-east4-a", region="us-east4")
        assert e.value.field == "image" and missing in e.value.problem


def test_a3_local_ssds_are_declared_so_a_reapply_keeps_the_vm():
    """a3-highgpu-8g comes with 16 bundled 375 GB local NVMe SSDs (GCE GPU machine types page;
    Cluster Toolkit sets local_ssd_count: 16 for A3). Left out of the instance's scratch disks,
    the provider sees GCE's disks as a difference and replaces the VM on the next apply:
    scratch_disk is ForceNew in google_compute_instance, and a machine type whose local SSDs
    GCE attaches itself shows "scratch_disk { # forces replacement }" on a re-apply of the same
    config (hashicorp/terraform-provider-google#19648 "Scratch disks force VM replacement on
    same state apply"; GoogleCloudPlatform/cloud-foundation-fabric#4148, for Z3)."""
    for vm in plan("gcp-a3").of_type(VM):
        assert vm.inputs["scratchDisks"] == [{"interface": "NVME"}] * 16
    for vm in plan("gcp-a2").of_type(VM):  # a2-highgpu has none bundled
        assert "scratchDisks" not in vm.inputs


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
    """An access config is what gives a GCE VM an external IPv4 (compute.instances
    networkInterfaces[].accessConfigs[]); Cloud NAT serves only VMs without one (Cloud NAT
    overview, https://cloud.google.com/nat/docs/overview), so with every VM public there is
    nothing for it to do; a firewall rule with target tags applies only to VMs carrying a tag
    (https://cloud.google.com/firewall/docs/firewalls#rule_assignment), so every VM carries
    the SSH rule's tag or its address would take no SSH."""
    p = plan("gcp-a2", public_workers=True)
    assert all(vm.inputs["networkInterfaces"][0]["accessConfigs"] for vm in p.of_type(VM))
    assert not p.of_type("gcp:compute/routerNat:RouterNat")
    assert all(n["public_ip"] for n in p.outputs["nodes"])
    fws = {f.name: f for f in p.of_type("gcp:compute/firewall:Firewall")}
    (ssh_tag,) = fws["gcp-a2-ssh"].inputs["targetTags"]
    assert all(ssh_tag in vm.inputs["tags"] for vm in p.of_type(VM))


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
    for vm in a2.of_type(VM):
        i = vm.name.rsplit("-", 1)[1]
        assert "/global/images/family/" in vm.inputs["bootDisk"]["initializeParams"]["image"]
        md = vm.inputs["metadata"]
        assert md["user-data"].startswith("#cloud-config")
        assert f"node-{i}" in md["user-data"] and "PRIVATE KEY" not in md["user-data"]
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
        # The boot disk carries the cluster but not the expiry (test_ttl_facts.py): a TTL change
        # must not touch the disk.
        disk_labels = vm.inputs["bootDisk"]["initializeParams"]["labels"]
        assert disk_labels["gpufleet-cluster"] == stack and "gpufleet-expires" not in disk_labels


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
    """A zone belongs to one region (GCE regions and zones). GCE limits a VM's run time, set
    as a duration or as a termination time, to at least 30 seconds and at most 120 days
    (cloud.google.com/compute/docs/instances/limit-vm-runtime, "Limitations"): a longer TTL
    would fail only at `pulumi up`, so the spec takes 120 days and refuses a minute more."""
    with pytest.raises(SpecError) as e:
        plan("gcp-g2", region="us-central1", zone="europe-west4-b")
    assert e.value.field == "zone"
    days_120 = 120 * 24 * 60
    (vm, *_) = plan("gcp-g2", ttl_minutes=days_120).of_type(VM)
    assert vm.inputs["scheduling"]["terminationTime"]
    for too_long in (days_120 + 1, 121 * 24 * 60):
        with pytest.raises(SpecError) as e:
            plan("gcp-g2", ttl_minutes=too_long)
        assert e.value.field == "ttl_minutes"


def test_a_region_without_known_gpu_zones_needs_an_explicit_zone():
    """A guessed zone fails only at `pulumi up`, after the network is created; gpufleet asks
    for the zone instead (GCE "GPU regions and zones": not every region offers every GPU)."""
    with pytest.raises(SpecError) as e:
        plan("gcp-g2", region="southamerica-west1", zone=None)
    assert e.value.field == "zone"


@pytest.mark.parametrize(
    ("tags", "why"),
    [({"1team": "x"}, "not a valid"), ({"": "x"}, "not a valid"),
     ({"Team": "a", "team": "b"}, "same GCP label key"), ({"k" * 64: "x"}, "not a valid")],
)  # fmt: skip
def test_label_keys_gce_would_refuse_or_merge_are_refused(tags, why):
    """GCE label keys must start with a lowercase letter and hold 1-63 lowercase letters,
    digits, '_' or '-', and keys are unique per resource
    (cloud.google.com/compute/docs/labeling-resources#requirements): `1team` and an empty key
    are refused by the API, and `Team`/`team` would silently become one label."""
    with pytest.raises(SpecError) as e:
        plan("gcp-g2", tags=tags)
    assert e.value.field == "tags" and why in e.value.problem


# GCE label requirements, as the doc words them (not components/gcp/rules.py's patterns):
# keys 1-63 characters, starting with a lowercase letter; keys and values only lowercase
# letters, digits, '_' and '-'; values at most 63 characters.
GCE_LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
GCE_LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")


def test_a_tag_gce_would_refuse_as_is_lands_as_a_label_gce_takes():
    """GCE refuses a label key or value with an uppercase letter or a space: keys and values
    may hold only lowercase letters, digits, underscores and dashes, a key starts with a
    lowercase letter, both at most 63 characters (cloud.google.com/compute/docs/
    labeling-resources#requirements). A `Team: ML Platform` tag, fine on AWS and Azure, must
    still reach every labelled GCP resource in a form GCE accepts."""
    p = plan("gcp-g2", tags={"Team": "ML Platform"})
    labelled = [r for r in p.resources if r.type.startswith("gcp:") and labelable(r.type)]
    assert labelled
    for r in labelled:
        labels = r.inputs["labels"]
        assert labels["team"] == "ml_platform", r.name
        for k, v in labels.items():
            assert GCE_LABEL_KEY.fullmatch(k) and GCE_LABEL_VALUE.fullmatch(v), (r.name, k, v)


def test_compact_placement_cap_is_enforced_in_the_spec():
    """A compact placement policy holds at most 150 VMs (GCE placement policies overview,
    cloud.google.com/compute/docs/instances/define-instance-placement); a bigger A2/A3 cluster
    would fail at creation. The spec refuses it; G2 gets no compact policy and is not capped."""
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.components.gcp.rules import check_spec

    base = {"name": "big", "cloud": "gcp", "instance_type": "a2-highgpu-8g",
            "ssh_cidrs": ["203.0.113.0/24"], "zone": "us-central1-a"}  # fmt: skip
    check_spec(ClusterSpec.from_input({**base, "nodes": 150}))
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_input({**base, "nodes": 151})
    assert e.value.field == "nodes" and "150" in e.value.problem
    ClusterSpec.from_input({**base, "nodes": 151, "instance_type": "g2-standard-8"})


SA = "gcp:serviceaccount/account:Account"
ROLE = "gcp:projects/iAMCustomRole:IAMCustomRole"
BINDING = "gcp:compute/instanceIAMMember:InstanceIAMMember"


@pytest.mark.parametrize("stack", ["gcp-a2", "gcp-g2"])
def test_every_node_runs_as_the_clusters_account_with_a_token_the_compute_api_takes(stack):
    """A VM's processes get OAuth tokens for the service account attached to the instance from
    the metadata server, limited by the instance's access scopes; with only the default scopes
    the token cannot call the Compute API, and the recommended scope is cloud-platform with IAM
    doing the limiting (compute/docs/access/service-accounts, "Access scopes"). The node's
    expiry script deletes its VM with that token."""
    p = plan(stack)
    (sa,) = p.of_type(SA)
    email = f"{sa.inputs['accountId']}@p.iam.gserviceaccount.com"
    for vm in p.of_type(VM):
        assert vm.inputs["serviceAccount"] == {
            "email": email,
            "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        }


def test_the_account_may_delete_the_clusters_instances_and_nothing_else(a2):
    """compute.instances.delete is the one permission instances.delete needs
    (compute/docs/reference/rest/v1/instances/delete, "IAM Permissions"). A role granted on the
    project would reach every VM in it; Compute Engine takes IAM policies on single instances
    (compute/docs/access/managing-access-to-resources, "Supported resources"), and a custom role
    can hold exactly that permission (iam/docs/creating-custom-roles): one binding per instance,
    for this cluster's account, on this cluster's instances, and no project-level binding."""
    (sa,) = a2.of_type(SA)
    (role,) = a2.of_type(ROLE)
    assert role.inputs["permissions"] == ["compute.instances.delete"]
    bindings = a2.of_type(BINDING)
    vms = a2.of_type(VM)
    assert len(bindings) == len(vms) == 2
    assert {b.inputs["instanceName"] for b in bindings} == {f"{vm.name}-4f2a9c1" for vm in vms}
    member = f"serviceAccount:{sa.inputs['accountId']}@p.iam.gserviceaccount.com"
    for b in bindings:
        assert b.inputs["role"] == f"projects/p/roles/{role.inputs['roleId']}"
        assert b.inputs["member"] == member
        assert b.inputs["zone"] == "us-central1-c" and "condition" not in b.inputs
    assert not [r for r in a2.resources if r.type.startswith("gcp:projects/iAM") and r != role]


def test_every_cluster_shares_one_account_and_one_role_whatever_its_name_or_expiry():
    """Item 12. IAM projects.roles.delete (cloud.google.com/iam/docs/reference/rest/v1/
    projects.roles/delete, read 2026-11-25): "A deleted custom role still counts toward the
    custom role limit until it is permanently deleted", which is after 7 days; Pulumi's
    gcp.projects.IAMCustomRole page (read 2026-11-25): the role id is free again only "between 7
    and 37 days after deletion". A project holds 100 service accounts by default (IAM quotas).
    A role and an account per cluster churned both; one of each, with fixed ids, whatever the
    cluster, is never deleted, and a cluster's own part is its instance bindings."""
    ids = set()
    for stack, over in (("gcp-a2", {}), ("gcp-g2", {"ttl_minutes": 30}), ("gcp-a2", {"nodes": 3})):
        p = plan(stack, **over)
        (sa,) = p.of_type(SA)
        (role,) = p.of_type(ROLE)
        ids.add((sa.inputs["accountId"], role.inputs["roleId"]))
        # A deleted role keeps counting for 7 days: no cluster's `down` may delete either.
        assert sa.retain_on_delete and role.retain_on_delete
    assert len(ids) == 1
    (account, role_id) = ids.pop()
    assert re.fullmatch(r"[a-z][-a-z0-9]{4,28}[a-z0-9]", account)
    assert re.fullmatch(r"[a-zA-Z0-9_.]{3,64}", role_id)


def test_the_nodes_enforce_their_lease_by_deleting_themselves_not_powering_off(a2):
    """GCE's terminationTime deletes a VM at the hard expiry; "the termination timestamp is
    automatically cleared whenever a VM is stopped" (limit-vm-runtime), so the node's own expiry
    deletes the VM (gce-delete) and never powers off; terminationTime stays as the hard expiry."""
    import yaml

    for vm in a2.of_type(VM):
        doc = yaml.safe_load(vm.inputs["metadata"]["user-data"])
        files = {f["path"]: f["content"] for f in doc["write_files"]}
        assert "GPUFLEET_TTL_ACTION=gce-delete" in files["/etc/gpufleet/env"]
        assert "/usr/local/sbin/gpufleet-expire" in files
        assert ["systemctl", "enable", "--now", "--no-block", "gpufleet-ttl.timer"] in doc["runcmd"]
        assert vm.inputs["scheduling"]["terminationTime"] == "2030-03-17T17:46:40Z"
