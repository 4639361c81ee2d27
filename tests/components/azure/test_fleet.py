"""Azure stacks under mocks: one availability set + PPG, VNet clear of 172.16/16, HPC image, NSG."""

from __future__ import annotations

import base64
import ipaddress

import pytest

from components.errors import SpecError
from tests.components.stackplans import assert_contract, plan, tagged_with_cluster

VM = "azure-native:compute:VirtualMachine"
UNTAGGABLE = {
    "tls:index/privateKey:PrivateKey",
    "gpufleet:azure:GpuFleet",
    "azure-native:network:Subnet",
    "azure-native:authorization:RoleAssignment",
}


@pytest.fixture(scope="module")
def nd():
    return plan("azure-nd-a100")


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_nodes_share_one_availability_set_in_one_proximity_group(stack):
    nd = plan(stack)
    (avset,) = nd.of_type("azure-native:compute:AvailabilitySet")
    (ppg,) = nd.of_type("azure-native:compute:ProximityPlacementGroup")
    vms = nd.of_type(VM)
    assert len(vms) == 2
    assert {vm.inputs["availabilitySet"]["id"] for vm in vms} == {f"{avset.name}-id"}
    assert len({vm.inputs["proximityPlacementGroup"]["id"] for vm in vms}) == 1
    assert avset.inputs["proximityPlacementGroup"]["id"] == f"{ppg.name}-id"


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
    p = plan("azure-nd-a100", public_workers=True)
    assert len(p.of_type("azure-native:network:PublicIPAddress")) == 2
    assert not p.of_type("azure-native:network:NatGateway")
    assert all(n["public_ip"] for n in p.outputs["nodes"])


def test_hpc_image_and_custom_data_with_ttl_identity(nd):
    for vm in nd.of_type(VM):
        ref = vm.inputs["storageProfile"]["imageReference"]
        assert (ref["publisher"], ref["offer"], ref["sku"]) == (
            "microsoft-dsvm",
            "ubuntu-hpc",
            "2204",
        )
        text = base64.b64decode(vm.inputs["osProfile"]["customData"]).decode()
        assert text.startswith("#cloud-config")
        assert vm.inputs["identity"]["type"] == "UserAssigned"
        assert "priority" not in vm.inputs
    role = nd.one("azure-native:authorization:RoleAssignment")
    assert role.inputs["roleDefinitionId"].endswith("9980e02c-c2be-4d73-94e8-173b1dc7cf3c")


def test_spot_evicts_by_deletion_outside_any_availability_set():
    p = plan("azure-nd-a100", instance_type="Standard_NC96ads_A100_v4", spot=True)
    vms = p.of_type(VM)
    assert len(vms) == 2
    for vm in vms:
        assert vm.inputs["priority"] == "Spot" and vm.inputs["evictionPolicy"] == "Delete"
        assert "availabilitySet" not in vm.inputs  # ARM refuses Spot VMs in one
        assert vm.inputs["proximityPlacementGroup"]["id"]
    assert not p.of_type("azure-native:compute:AvailabilitySet")


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_spot_on_an_infiniband_size_is_refused(stack):
    with pytest.raises(SpecError) as e:
        plan(stack, spot=True)
    assert e.value.field == "spot"


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
