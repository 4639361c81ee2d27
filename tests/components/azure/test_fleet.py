"""Azure stacks under mocks: one availability set + PPG, VNet clear of 172.16/16, image, NSG."""

from __future__ import annotations

import base64
import gzip
import ipaddress
import re

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.azure.mocks import FAKE_SUBSCRIPTION
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from tests.components.stackplans import assert_contract, plan, tagged_with_cluster

VM = "azure-native:compute:VirtualMachine"
UNTAGGABLE = {
    "tls:index/privateKey:PrivateKey",
    "gpufleet:index:AzureGpuFleet",
    "azure-native:network:Subnet",
    "azure-native:authorization:RoleAssignment",
    "azure-native:authorization:RoleDefinition",
}


@pytest.fixture(scope="module")
def nd():
    return plan("azure-nd-a100")


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_nodes_share_one_availability_set_in_one_proximity_group(stack):
    """InfiniBand connects VMs of one availability set or one Uniform scale set with a single
    placement group; a Flexible scale set gets no InfiniBand at all (azure-compute-docs,
    articles/virtual-machine-scale-sets/virtual-machine-scale-sets-orchestration-modes.md,
    Networking table: "Infiniband Networking | No | Yes, single placement group only | Yes").
    So every ND node sits in one availability set with one fault domain, and no Flexible set."""
    nd = plan(stack)
    avset = nd.one("azure-native:compute:AvailabilitySet")
    assert avset.inputs["platformFaultDomainCount"] == 1
    assert not nd.of_type("azure-native:compute:VirtualMachineScaleSet")
    (ppg,) = nd.of_type("azure-native:compute:ProximityPlacementGroup")
    vms = nd.of_type(VM)
    assert len(vms) == 2
    assert {vm.inputs["availabilitySet"]["id"] for vm in vms} == {f"{avset.name}-id"}
    assert all("virtualMachineScaleSet" not in vm.inputs for vm in vms)
    assert {vm.inputs["proximityPlacementGroup"]["id"] for vm in vms} == {f"{ppg.name}-id"}
    assert avset.inputs["proximityPlacementGroup"]["id"] == f"{ppg.name}-id"


def test_an_infiniband_cluster_stays_within_an_availability_sets_200_vms():
    """An availability set holds at most 200 VMs (same page, "Maximum Instance Count": 200)."""
    config = stackconfig.stack_config("azure-nd-a100")
    data = stackconfig.spec_from_config(config, stack="azure-nd-a100").model_dump()
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_input({**data, "nodes": 201})
    assert e.value.field == "nodes" and "200" in e.value.problem


def test_vnet_avoids_the_rdma_range(nd):
    vnet = nd.one("azure-native:network:VirtualNetwork")
    reserved = ipaddress.ip_network("172.16.0.0/16")
    for prefix in vnet.inputs["addressSpace"]["addressPrefixes"]:
        assert not ipaddress.ip_network(prefix).overlaps(reserved)


def test_accelerated_networking_and_ssh_only_from_stack_cidrs(nd):
    for nic in nd.of_type("azure-native:network:NetworkInterface"):
        assert nic.inputs["enableAcceleratedNetworking"] is True
    (rule,) = nd.one("azure-native:network:NetworkSecurityGroup").inputs["securityRules"]
    assert rule["destinationPortRange"] == "22" and rule["access"] == "Allow"
    assert rule["sourceAddressPrefixes"] == ["203.0.113.0/24"]


def test_only_the_heads_nic_has_a_public_ip_and_takes_ssh_from_outside(nd):
    """A VM's NIC reaches and is reached from the internet only through a public IP on its
    IP configuration; an NSG rule whose destination is an application security group
    applies only to the NICs in that group, and the default AllowVnetInBound rule lets
    VMs of the VNet in (NSG overview and application security groups:
    https://learn.microsoft.com/azure/virtual-network/network-security-groups-overview,
    .../application-security-groups). Workers get no public IP and are not in the SSH
    group: SSH reaches them from the head only."""
    nics = {n.name: n for n in nd.of_type("azure-native:network:NetworkInterface")}
    head = nics["azure-nd-a100-node-0-nic"].inputs["ipConfigurations"][0]
    worker = nics["azure-nd-a100-node-1-nic"].inputs["ipConfigurations"][0]
    assert head["publicIPAddress"] and not worker.get("publicIPAddress")
    assert len(head["applicationSecurityGroups"]) == 1
    assert not worker.get("applicationSecurityGroups")
    pips = [p.name for p in nd.of_type("azure-native:network:PublicIPAddress")]
    assert sorted(pips) == ["azure-nd-a100-nat-ip", "azure-nd-a100-node-0-ip"]
    (rule,) = nd.one("azure-native:network:NetworkSecurityGroup").inputs["securityRules"]
    assert rule["destinationApplicationSecurityGroups"] == head["applicationSecurityGroups"]
    assert "destinationAddressPrefix" not in rule
    assert nd.outputs["nodes"][1]["public_ip"] is None


def test_workers_reach_the_internet_through_a_nat_gateway(nd):
    """VMs in VNets created after 30 September 2025 have no default outbound access; a
    VM without a public IP needs a NAT gateway (default outbound access:
    https://learn.microsoft.com/azure/virtual-network/ip-services/default-outbound-access).
    With a NAT gateway on the subnet, a VM's own public IP still takes inbound connections
    and answers them (NAT gateway and instance-level public IPs, https://learn.microsoft.com/
    azure/nat-gateway/nat-gateway-resource)."""
    nat = nd.one("azure-native:network:NatGateway")
    subnet = nd.one("azure-native:network:Subnet")
    assert subnet.inputs["natGateway"]["id"] == f"{nat.name}-id"
    assert nat.inputs["sku"]["name"] == "Standard"


def test_public_workers_gives_every_nic_a_public_ip_and_needs_no_nat():
    """A VM with a public IP explicitly associated with it has explicit outbound
    connectivity, as a NAT gateway would give it (default outbound access, "Examples of
    explicit outbound connectivity": https://learn.microsoft.com/azure/virtual-network/
    ip-services/default-outbound-access), so with a public IP on every NIC no NAT gateway is
    needed; an NSG rule whose destination is an application security group applies only to
    the NICs in it (application-security-groups), so every NIC joins the SSH group."""
    p = plan("azure-nd-a100", public_workers=True)
    assert not p.of_type("azure-native:network:NatGateway")
    pips = {f"{ip.name}-id" for ip in p.of_type("azure-native:network:PublicIPAddress")}
    (rule,) = p.one("azure-native:network:NetworkSecurityGroup").inputs["securityRules"]
    for nic in p.of_type("azure-native:network:NetworkInterface"):
        (cfg, *_) = nic.inputs["ipConfigurations"]
        assert cfg["publicIPAddress"]["id"] in pips
        assert cfg["applicationSecurityGroups"] == rule["destinationApplicationSecurityGroups"]
    assert all(n["public_ip"] for n in p.outputs["nodes"])


def test_hpc_image_pinned_and_custom_data(nd):
    """A marketplace image "latest" moves: microsoft-dsvm:ubuntu-hpc:2204 changes its NVIDIA
    driver branch between versions (azhpc-images versions.json per release), and the recipe
    replaces a driver off the version set's branch, so the image version is pinned. ARM takes
    an image version as "Major.Minor.Build" (decimal numbers) or "latest", which it resolves
    at deploy time (ImageReference.version, Azure Compute API reference): only the first is a
    pin."""
    for vm in nd.of_type(VM):
        ref = vm.inputs["storageProfile"]["imageReference"]
        assert (ref["publisher"], ref["offer"], ref["sku"]) == (
            "microsoft-dsvm",
            "ubuntu-hpc",
            "2204",
        )
        assert re.fullmatch(r"\d+\.\d+\.\d+", ref["version"]), ref["version"]
        text = gzip.decompress(base64.b64decode(vm.inputs["osProfile"]["customData"])).decode()
        assert text.startswith("#cloud-config")
        assert "priority" not in vm.inputs


def test_the_node_makes_its_host_key_once_per_instance_so_a_reboot_keeps_it(nd):
    """Who writes /etc/ssh/ssh_host_* on Azure: waagent picks its provisioning agent with
    Provisioning.Agent (default "auto": it detects cloud-init and leaves provisioning to it), and
    its own host-key regeneration happens "during the provisioning process" only
    (Azure/WALinuxAgent README, Provisioning.Agent, Provisioning.RegenerateSshHostKeyPair).
    cloud-init's ssh module deletes the image's host keys (ssh_deletekeys) and generates the
    missing ones with "frequency": PER_INSTANCE (canonical/cloud-init cc_ssh.py), i.e. once per
    instance-id, which a reboot keeps; keys_to_console prints them on the serial console, where
    gpufleet reads the one it pins. Nothing per boot (bootcmd), no other writer of the key files,
    and no private host key in custom data."""
    import yaml

    for vm in nd.of_type(VM):
        text = gzip.decompress(base64.b64decode(vm.inputs["osProfile"]["customData"])).decode()
        doc = yaml.safe_load(text)
        assert doc["ssh_deletekeys"] is True and doc["ssh_genkeytypes"] == ["ed25519"]
        assert "ssh_keys" not in doc and "PRIVATE KEY" not in text
        assert doc["ssh"]["emit_keys_to_console"] is True
        assert "bootcmd" not in doc
        assert not [f for f in doc.get("write_files", []) if "ssh_host_" in f["path"]]
        assert not [c for c in doc.get("runcmd", []) if "ssh_host_" in str(c)]


def test_each_node_may_delete_only_itself(nd):
    """A user-assigned identity is usable by any process on a VM it is attached to (IMDS hands
    out its tokens, containers included), and a role assignment on the resource group covers
    every VM in it (Azure RBAC scope inheritance). Each node gets its own identity, allowed on
    its own VM, NIC and OS disk only (what ARM's delete of the VM touches: the disk is deleted
    with it, the NIC detached), never on the group or a neighbour."""
    (custom,) = [
        r for r in nd.of_type("azure-native:authorization:RoleDefinition")
        if r.name.endswith("-node-role")
    ]  # fmt: skip
    roles = [
        r for r in nd.of_type("azure-native:authorization:RoleAssignment")
        if r.inputs["roleDefinitionId"] == f"{custom.name}-id"
    ]  # fmt: skip
    ids = nd.of_type("azure-native:managedidentity:UserAssignedIdentity")
    assert len(ids) == 2 and len(roles) == 6
    for role in roles:
        assert role.inputs["roleDefinitionId"] == f"{custom.name}-id"
    principals = set()
    for vm in nd.of_type(VM):
        (own,) = vm.inputs["identity"]["userAssignedIdentities"]
        assert own == f"{vm.name}-id-id"  # its own identity, not a shared one
        mine = [r for r in roles if r.name.startswith(f"{vm.name}-")]
        assert {r.inputs["scope"] for r in mine} == {
            f"{vm.name}-nic-id",
            f"{vm.name}-id",
            f"/subscriptions/{FAKE_SUBSCRIPTION}/resourceGroups/azure-nd-a100-rg/providers/"
            f"Microsoft.Compute/disks/{vm.name}-osdisk",
        }
        (principal,) = {r.inputs["principalId"] for r in mine}
        principals.add(principal)
        assert vm.inputs["storageProfile"]["osDisk"]["name"] == f"{vm.name}-osdisk"
    assert len(principals) == 2


def test_vms_wait_for_a_role_assignment_so_a_contributor_fails_before_any_vm():
    """Creating a role assignment needs Microsoft.Authorization/roleAssignments/write, which the
    Contributor role does not have (Azure built-in roles: Contributor's NotActions include
    Microsoft.Authorization/*/Write). Every VM depends on its node's first role assignment, so
    a caller without it fails before any GPU VM exists, and the error is named plainly."""
    from gpufleet.components.registry import explain_failure

    p = plan("azure-nd-a100")
    roles = {r.name for r in p.of_type("azure-native:authorization:RoleAssignment")}
    for vm in p.of_type(VM):
        assert f"{vm.name}-nic-role" in vm.depends_on and f"{vm.name}-nic-role" in roles
    err = (
        "AuthorizationFailed: The client 'x' does not have authorization to perform action "
        "'Microsoft.Authorization/roleAssignments/write' over scope '/subscriptions/...'"
    )
    problem, fix = explain_failure("azure", err)
    assert "roleAssignments/write" in problem and "No VM was created" in problem
    assert "Owner" in fix


def test_spot_is_refused_on_infiniband_sizes_and_runs_without_a_set_otherwise():
    """ARM allows no Spot VM in an availability set (same page: "Spot instances and pricing |
    ... | No, Regular priority instances only"), and without the set ND nodes share no
    InfiniBand: spot is refused on InfiniBand sizes; other sizes run Spot, evicted by deletion,
    outside any set."""
    with pytest.raises(SpecError) as e:
        plan("azure-nd-a100", instance_type="Standard_ND96asr_v4", spot=True)
    assert e.value.field == "spot"
    p = plan("azure-nd-a100", instance_type="Standard_NC96ads_A100_v4", spot=True)
    assert not p.of_type("azure-native:compute:AvailabilitySet")
    for vm in p.of_type(VM):
        assert vm.inputs["priority"] == "Spot" and vm.inputs["evictionPolicy"] == "Delete"
        assert "availabilitySet" not in vm.inputs


@pytest.mark.parametrize(
    ("tags", "why"),
    [({"a/b": "x"}, "contains /"), ({"Team": "a", "team": "b"}, "case-insensitive"),
     ({"azure-owner": "x"}, "reserves"), ({"t": "v" * 257}, "256"), ({"": "x"}, "1-512")],
)  # fmt: skip
def test_tags_arm_would_refuse_or_merge_are_refused(tags, why):
    """ARM tag names hold at most 512 characters and none of < > % & \\ ? /, are
    case-insensitive, may not start with microsoft/azure/windows, and values hold at most 256
    characters (learn.microsoft.com/azure/azure-resource-manager/management/tag-resources
    #limitations)."""
    with pytest.raises(SpecError) as e:
        plan("azure-nd-a100", tags=tags)
    assert e.value.field == "tags" and why in e.value.problem


@pytest.mark.parametrize("user", ["admin", "root", "Ubuntu", "1user", "u" * 65])
def test_admin_user_names_azure_refuses_are_refused(user):
    """OSProfile.adminUsername (Compute REST API): Linux names of 1-64 characters, and a list
    of disallowed values ("administrator", "admin", "root", "user", ...)."""
    with pytest.raises(SpecError) as e:
        plan("azure-nd-a100", ssh_user=user)
    assert e.value.field == "ssh_user"


def test_empty_ssh_cidrs_are_refused():
    with pytest.raises(SpecError) as e:
        plan("azure-nd-a100", ssh_cidrs=[])
    assert e.value.field == "ssh_cidrs"


def test_no_rule_lets_ssh_in_from_everywhere():
    for stack in ("azure-nd-a100", "azure-nd-h100"):
        nsg = plan(stack).one("azure-native:network:NetworkSecurityGroup")
        for rule in nsg.inputs["securityRules"]:
            sources = rule.get("sourceAddressPrefixes") or [rule.get("sourceAddressPrefix")]
            assert not {"*", "0.0.0.0/0", "Internet", "Any"} & set(sources), rule


def test_every_taggable_resource_carries_cluster_and_expiry(nd):
    for r in nd.resources:
        if r.type in UNTAGGABLE:
            continue
        assert tagged_with_cluster(r.inputs.get("tags"), "azure-nd-a100"), r.type


def test_contract_outputs(nd):
    assert_contract(nd, 2)
    assert nd.outputs["fabric"] == "infiniband" and nd.outputs["ssh_user"] == "azureuser"


# azure-identity (learn.microsoft.com/python/api/azure-identity/azure.identity.environmentcredential
# and .defaultazurecredential, read 2026-11-25): EnvironmentCredential reads these, and
# DefaultAzureCredential's ManagedIdentityCredential takes AZURE_CLIENT_ID as the user-assigned
# identity to use.
AZURE_IDENTITY_ENV = {
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_CLIENT_CERTIFICATE_PATH",
    "AZURE_USERNAME",
    "AZURE_PASSWORD",
}


def test_the_node_env_names_no_variable_azure_identity_reads(nd):
    """The node's env carries its self-delete identity's client id; under AZURE_CLIENT_ID,
    user code's DefaultAzureCredential on the node would pick the node identity up."""
    for vm in nd.of_type(VM):
        text = gzip.decompress(base64.b64decode(vm.inputs["osProfile"]["customData"])).decode()
        names = set(re.findall(r"^\s*([A-Z][A-Z0-9_]*)=", text, re.M))
        assert "GPUFLEET_AZURE_CLIENT_ID" in names
        assert not names & AZURE_IDENTITY_ENV
