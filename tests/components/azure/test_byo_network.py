"""A Pulumi program composing AzureGpuFleet with its own VNet, subnet and azure-native provider.

Azure facts the tests state (read 2026-11-25):
- learn.microsoft.com/azure/virtual-network/virtual-network-network-interface: a NIC joins a
  subnet of a VNet in the NIC's own region and subscription.
- learn.microsoft.com/azure/virtual-network/network-security-group-how-it-works: an NSG is
  associated with a subnet, a NIC, both, or neither; a NIC has at most one NSG, so an "extra"
  NSG on a NIC is not a thing: the user's NSG replaces gpufleet's, and extra rules reach the
  nodes through application security groups the NICs join.
- learn.microsoft.com/azure/virtual-network/subnet-delegation-overview: a delegated subnet is
  reserved for the delegated service's resources.
- learn.microsoft.com/azure/virtual-network/application-security-groups: all network
  interfaces assigned to an application security group must exist in the same virtual network.
- learn.microsoft.com/azure/virtual-machines/setup-infiniband ("RDMA network address space"):
  "The RDMA network in Azure reserves the address space 172.16.0.0/16. To run MPI applications
  on instances deployed in an Azure virtual network, make sure that the virtual network address
  space does not overlap the RDMA network": the VNet's addressSpace.addressPrefixes, not only
  the subnet's prefix.
"""

from __future__ import annotations

import urllib.error
from typing import Any

import pulumi
import pulumi_azure_native as az
import pytest

from gpufleet.components.azure import AzureGpuFleet
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from gpufleet.components.preview import Plan, evaluate
from gpufleet.components.validators import AccountError, FakeAccount

SUB = "11111111-2222-3333-4444-555555555555"  # the explicit provider's subscription
PROVIDER = "westus3-sub"
SIZE = "Standard_ND96isr_H100_v5"
EXPIRES = 1_900_000_000
CIDRS = ["203.0.113.0/24"]
MY_SUBNET = (
    f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/"
    "virtualNetworks/mine/subnets/gpu"
)


def program(built: list[Any], **extra: Any):
    """The user's program: a provider for another subscription and region, their own group,
    VNet and subnet, and the fleet taking their Outputs."""

    def run() -> dict[str, Any]:
        prov = az.Provider(PROVIDER, location="westus3", subscription_id=SUB)
        mine = pulumi.ResourceOptions(provider=prov)
        rg = az.resources.ResourceGroup("net", location="westus3", opts=mine)
        vnet = az.network.VirtualNetwork(
            "mine",
            resource_group_name=rg.name,
            address_space=az.network.AddressSpaceArgs(address_prefixes=["10.60.0.0/16"]),
            opts=mine,
        )
        subnet = az.network.Subnet(
            "gpu",
            resource_group_name=rg.name,
            virtual_network_name=vnet.name,
            address_prefix="10.60.0.0/20",
            opts=mine,
        )
        args: dict[str, Any] = {
            "nodes": 2,
            "instance_type": SIZE,
            "expires_at": EXPIRES,
            "ssh_cidrs": CIDRS,
            "subnet_id": subnet.id,
            "resource_group_name": rg.name,
            **extra,
        }
        fleet = AzureGpuFleet("fleet", args, pulumi.ResourceOptions(providers=[prov]))
        built.append(fleet)
        return {"nodes": fleet.nodes}

    return run


def table(p: Plan) -> str:
    """kind | token/type | name | provider, for every invoke and resource of a plan."""
    rows = [("invoke", c.token, "-", c.provider or "default") for c in p.calls]
    rows += [("resource", r.type, r.name, r.provider or "default") for r in p.resources]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def image_account() -> FakeAccount:
    """ARM answering the image check (the quota and subnet checks are Outputs here)."""

    def arm(url: str) -> dict[str, Any]:
        assert f"/subscriptions/{SUB}/" in url, url  # the explicit provider's subscription
        if "/artifacttypes/vmimage/" in url:
            return {"name": "v", "properties": {"hyperVGeneration": "V2"}}
        if "/Microsoft.Authorization/roleAssignments?" in url:
            return {"value": []}
        raise AssertionError(url)

    return FakeAccount(arm=arm)


@pytest.fixture(scope="module")
def composed() -> tuple[Plan, Any]:
    built: list[Any] = []
    p = evaluate(program(built), account=image_account())
    print("\n" + table(p))
    return p, built[0]


def test_every_invoke_and_azure_resource_uses_the_explicit_provider(composed):
    p, _ = composed
    assert p.calls, "the fleet made no lookup"
    assert {(c.token, c.provider) for c in p.calls} == {
        ("azure-native:authorization:getClientConfig", PROVIDER)
    }
    azure = [r for r in p.resources if r.type.startswith("azure-native:")]
    assert azure and all(r.provider == PROVIDER for r in azure), [
        (r.type, r.name, r.provider) for r in azure if r.provider != PROVIDER
    ]


def test_no_vnet_subnet_group_or_nat_is_made_and_the_nics_join_the_users_subnet(composed):
    p, _ = composed
    assert [r.name for r in p.of_type("azure-native:network:VirtualNetwork")] == ["mine"]
    assert [r.name for r in p.of_type("azure-native:network:Subnet")] == ["gpu"]
    assert [r.name for r in p.of_type("azure-native:resources:ResourceGroup")] == ["net"]
    assert not p.of_type("azure-native:network:NatGateway")
    nics = p.of_type("azure-native:network:NetworkInterface")
    assert len(nics) == 2
    for nic in nics:
        assert nic.inputs["resourceGroupName"] == "net"
        assert [c["subnet"]["id"] for c in nic.inputs["ipConfigurations"]] == ["gpu-id"]


def test_the_region_and_subscription_come_from_the_provider(composed):
    p, fleet = composed
    assert fleet.spec.region == "westus3"
    assert {vm.inputs["location"] for vm in p.of_type("azure-native:compute:VirtualMachine")} == {
        "westus3"
    }
    scopes = {r.inputs["scope"] for r in p.of_type("azure-native:authorization:RoleAssignment")}
    # the user's group itself: no assignment on it (test_shared_group.py)
    assert f"/subscriptions/{SUB}/resourceGroups/net" not in scopes
    assert any(s.startswith(f"/subscriptions/{SUB}/resourceGroups/net/providers/") for s in scopes)


def test_outputs_never_reach_the_spec_and_their_checks_are_skipped_saying_why(composed):
    _, fleet = composed
    assert fleet.spec.subnet_id is None and fleet.spec.vpc_id is None
    checks = {c.fact: c for c in fleet.checks}
    subnet = checks["the subnet brought can hold the nodes"]
    assert subnet.status == "skipped" and "subnet_id is a pulumi.Output" in subnet.detail
    quota = checks["the vCPU quota covers the fleet"]
    assert quota.status == "skipped" and "resource_group_name is a pulumi.Output" in quota.detail
    assert checks["the pinned image version exists"].status == "passed"


def registered(run: Any, account: FakeAccount | None = None) -> tuple[BaseException, list[str]]:
    """Evaluate expecting a failure; (its SpecError/AccountError, gpufleet's resources made)."""
    made = Plan()
    with pytest.raises(Exception) as e:
        evaluate(run, account=account, into=made)
    seen = [f"{r.type}::{r.name}" for r in made.resources]
    err: BaseException | None = e.value
    while err is not None and not isinstance(err, (SpecError, AccountError)):
        err = err.__cause__ or err.__context__
    assert err is not None, repr(e.value)
    users = {"net", "mine", "gpu", PROVIDER}
    return err, [s for s in seen if s.split("::")[-1] not in users]


def test_a_region_other_than_the_providers_location_is_refused_before_anything():
    err, made = registered(program([], region="eastus"))
    assert isinstance(err, SpecError) and err.field == "region"
    assert "westus3" in err.problem and PROVIDER in err.problem
    assert made == []


def test_vpc_id_is_refused_naming_subnet_id_in_args_and_in_the_spec():
    vnet = f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v"
    err, made = registered(program([], vpc_id=vnet))
    assert isinstance(err, SpecError) and err.field == "vpc_id" and "subnet_id" in err.hint
    assert made == []
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_input(
            {"name": "c", "cloud": "azure", "instance_type": SIZE, "vpc_id": vnet}
        )
    assert e.value.field == "vpc_id"


def test_a_subnet_id_that_is_no_arm_subnet_id_is_refused():
    with pytest.raises(SpecError) as e:
        ClusterSpec.from_input(
            {"name": "c", "cloud": "azure", "instance_type": SIZE, "subnet_id": "subnet-123"}
        )
    assert e.value.field == "subnet_id" and "virtualNetworks" in e.value.hint


def test_ssh_cidrs_next_to_the_users_own_nsg_is_refused():
    err, made = registered(program([], network_security_group_id="nsg-id"))
    assert isinstance(err, SpecError) and err.field == "ssh_cidrs"
    assert made == []


def test_the_users_nsg_replaces_gpufleets_and_the_nics_join_their_asgs():
    built: list[Any] = []
    asgs = ["/asg/one", "/asg/two"]
    p = evaluate(
        program(
            built, ssh_cidrs=[], network_security_group_id="/nsg/mine",
            application_security_group_ids=asgs,
        )
    )  # fmt: skip
    assert not p.of_type("azure-native:network:NetworkSecurityGroup")
    assert not p.of_type("azure-native:network:ApplicationSecurityGroup")
    for nic in p.of_type("azure-native:network:NetworkInterface"):
        assert nic.inputs["networkSecurityGroup"]["id"] == "/nsg/mine"
        (config,) = nic.inputs["ipConfigurations"]
        assert [a["id"] for a in config["applicationSecurityGroups"]] == asgs


def vnet_answer(
    location: str = "westus3",
    prefix: str = "10.60.0.0/20",
    space: tuple[str, ...] = ("10.60.0.0/16",),
    **subnet: Any,
) -> Any:
    """ARM Virtual Networks - Get (learn.microsoft.com/rest/api/virtualnetwork/virtual-networks/
    get, read 2026-11-25): location, properties.addressSpace.addressPrefixes,
    properties.subnets[].name/properties.addressPrefix, delegations, natGateway."""

    def arm(url: str) -> dict[str, Any]:
        if "/virtualNetworks/mine?" in url:
            props = {"addressPrefix": prefix, **subnet}
            return {
                "name": "mine",
                "location": location,
                "properties": {
                    "addressSpace": {"addressPrefixes": list(space)},
                    "subnets": [{"name": "gpu", "properties": props}],
                },
            }
        if "/artifacttypes/vmimage/" in url:
            return {"name": "v", "properties": {"hyperVGeneration": "V2"}}
        if "/usages" in url or "/virtualMachines" in url or "/roleAssignments?" in url:
            return {"value": []}
        raise AssertionError(url)

    return FakeAccount(arm=arm)


def plain_program(built: list[Any], subnet_id: str = MY_SUBNET):
    def run() -> dict[str, Any]:
        prov = az.Provider(PROVIDER, location="westus3", subscription_id=SUB)
        fleet = AzureGpuFleet(
            "fleet",
            {
                "nodes": 2,
                "instance_type": SIZE,
                "expires_at": EXPIRES,
                "ssh_cidrs": CIDRS,
                "subnet_id": subnet_id,
                "resource_group_name": "net",
            },
            pulumi.ResourceOptions(provider=prov),
        )
        built.append(fleet)
        return {"nodes": fleet.nodes}

    return run


def test_a_plain_subnet_id_stays_in_the_spec_and_is_checked():
    built: list[Any] = []
    p = evaluate(plain_program(built), account=vnet_answer())
    assert built[0].spec.subnet_id == MY_SUBNET
    check = {c.fact: c for c in built[0].checks}["the subnet brought can hold the nodes"]
    assert check.status == "passed" and "gpu in mine (westus3)" in check.detail
    assert "no NAT gateway" in check.detail
    assert not p.of_type("azure-native:network:VirtualNetwork")
    # In a brought group the role count differs (no group-wide roles, the backstop's per VM):
    # what the check counts is what the plan registers.
    made = len(p.of_type("azure-native:authorization:RoleAssignment"))
    roles = {c.fact: c for c in built[0].checks}[
        "the subscription's role assignments have room for the fleet's"
    ]
    assert roles.status == "passed" and roles.detail.endswith(f"the cluster makes {made}")


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (vnet_answer(location="eastus"), "is in eastus"),
        (vnet_answer(prefix="172.16.4.0/24"), "172.16.0.0/16"),
        (
            vnet_answer(delegations=[{"properties": {"serviceName": "Microsoft.Web/serverFarms"}}]),
            "delegated to Microsoft.Web/serverFarms",
        ),
    ],
)
def test_a_subnet_that_cannot_hold_the_nodes_is_refused_before_anything(answer, words):
    err, made = registered(plain_program([]), account=answer)
    assert isinstance(err, AccountError) and words in err.problem
    assert made == []


# The RDMA range (setup-infiniband, above), written here: 172.16.0.0/16.
INFINIBAND_VNETS = [
    # (VNet address space, subnet, refused)
    (("10.60.0.0/16",), "10.60.0.0/20", False),
    (("10.60.0.0/16", "172.16.0.0/16"), "10.60.0.0/20", True),  # a second prefix inside
    (("172.0.0.0/8",), "172.20.0.0/20", True),  # the subnet outside, the space around it
    (("172.17.0.0/16", "192.168.0.0/16"), "172.17.0.0/20", False),  # next to it, not in it
]


@pytest.mark.parametrize(("space", "prefix", "refused"), INFINIBAND_VNETS)
def test_a_vnet_whose_address_space_overlaps_the_rdma_range_is_refused(space, prefix, refused):
    answer = vnet_answer(space=space, prefix=prefix)
    if not refused:
        built: list[Any] = []
        evaluate(plain_program(built), account=answer)
        check = {c.fact: c for c in built[0].checks}["the subnet brought can hold the nodes"]
        assert check.status == "passed", check
        return
    err, made = registered(plain_program([]), account=answer)
    print(f"\n{err}\nfix: {getattr(err, 'hint', '')}")
    assert isinstance(err, AccountError) and "address space" in err.problem
    assert "172.16.0.0/16" in err.problem and made == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("network_security_group_id", "/nsg/mine"), ("application_security_group_ids", ["/asg/a"])],
)
def test_the_users_nsg_or_asgs_without_subnet_id_are_refused(field, value):
    def run() -> dict[str, Any]:
        args: dict[str, Any] = {"instance_type": SIZE, "expires_at": EXPIRES, field: value}
        AzureGpuFleet("fleet", {**args, "ssh_cidrs": [] if field.startswith("network") else CIDRS})
        return {}

    err, made = registered(run)
    print(f"\n{err}\nfix: {getattr(err, 'hint', '')}")
    assert isinstance(err, SpecError) and err.field == field
    assert "subnet_id" in err.problem and "subnet_id" in err.hint
    assert made == []


def test_a_provider_location_unknown_at_preview_says_the_region_check_was_skipped(monkeypatch):
    """At a preview, a provider whose location is another resource's output not known yet:
    the plan's checks say the region was not compared, and why."""
    set_mocks = pulumi.runtime.set_mocks
    monkeypatch.setattr(
        pulumi.runtime, "set_mocks", lambda *a, **k: set_mocks(*a, **{**k, "preview": True})
    )
    built: list[Any] = []

    def run() -> dict[str, Any]:
        rg = az.resources.ResourceGroup("net", location="westus3")
        # managedBy: an output the mocks never fill, so unknown at this preview
        prov = az.Provider(PROVIDER, location=rg.managed_by)
        args: dict[str, Any] = {"instance_type": SIZE, "expires_at": EXPIRES, "region": "eastus"}
        fleet = AzureGpuFleet(
            "f", {**args, "ssh_cidrs": CIDRS}, pulumi.ResourceOptions(provider=prov)
        )
        built.append(fleet)
        return {}

    evaluate(run)
    checks = {c.fact: c for c in built[0].checks}
    print("\n" + "\n".join(f"{c.status}: {c.fact}: {c.detail}" for c in built[0].checks))
    region = checks["the region is the provider's location"]
    assert region.status == "skipped"
    assert PROVIDER in region.detail and "not known" in region.detail
    assert "eastus" in region.detail


def test_a_missing_vnet_or_another_subscriptions_subnet_is_refused():
    def gone(url: str) -> dict[str, Any]:
        if "/virtualNetworks/" in url:
            raise urllib.error.HTTPError(url, 404, "Not Found", None, None)  # type: ignore[arg-type]
        return {"value": []} if "/usages" in url else {"properties": {"hyperVGeneration": "V2"}}

    err, _ = registered(plain_program([]), account=FakeAccount(arm=gone))
    assert isinstance(err, AccountError) and "does not exist" in err.problem
    other = MY_SUBNET.replace(SUB, "99999999-0000-0000-0000-000000000000")
    err, made = registered(plain_program([], other), account=vnet_answer())
    assert isinstance(err, AccountError) and "subscription 99999999" in err.problem
    assert made == []


def test_the_stack_path_honours_subnet_id_and_makes_no_vnet():
    """The CLI/ready-stack path (ClusterSpec -> stackconfig.build): main made a VNet anyway."""
    from tests.components.stackplans import plan

    p = plan("azure-nd-a100", subnet_id=MY_SUBNET)
    assert not p.of_type("azure-native:network:VirtualNetwork")
    assert not p.of_type("azure-native:network:Subnet")
    assert not p.of_type("azure-native:network:NatGateway")
    for nic in p.of_type("azure-native:network:NetworkInterface"):
        assert [c["subnet"]["id"] for c in nic.inputs["ipConfigurations"]] == [MY_SUBNET]


def test_the_default_providers_location_config_is_the_region_too():
    def run(region: str | None) -> Any:
        def prog() -> dict[str, Any]:
            args: dict[str, Any] = {"instance_type": SIZE, "expires_at": EXPIRES}
            fleet = AzureGpuFleet("f", {**args, "ssh_cidrs": CIDRS, "region": region})
            built.append(fleet)
            return {}

        return prog

    built: list[Any] = []
    evaluate(run(None), config={"azure-native:location": "westus3"})
    assert built[0].spec.region == "westus3"
    with pytest.raises(Exception) as e:
        evaluate(run("eastus"), config={"azure-native:location": "westus3"})
    assert "region: is eastus" in str(e.value)


def shared_group(limit: int) -> FakeAccount:
    """The user's group "net" holds the fleet's own VM (tagged with its cluster) and another
    VM of the same family; the usages count both (96 vCPUs each, Virtual Machines - List:
    tags, properties.hardwareProfile.vmSize)."""

    def arm(url: str) -> dict[str, Any]:
        group = f"https://management.azure.com/subscriptions/{SUB}/resourceGroups/net/"
        if url.startswith(group + "providers/Microsoft.Compute/virtualMachines?"):
            vm = {"properties": {"hardwareProfile": {"vmSize": SIZE}}}
            return {"value": [{**vm, "tags": {"gpufleet-cluster": "fleet"}}, {**vm, "tags": {}}]}
        if "/usages" in url:
            name = {"value": "standardNDSH100v5Family", "localizedValue": "NDSH100v5 vCPUs"}
            return {"value": [{"currentValue": 192, "limit": limit, "name": name}]}
        return vnet_answer().arm(url)  # type: ignore[misc]

    return FakeAccount(arm=arm)


def test_in_a_shared_group_only_the_clusters_own_vms_are_credited_against_the_quota():
    built: list[Any] = []
    evaluate(plain_program(built), account=shared_group(limit=288))
    quota = {c.fact: c for c in built[0].checks}["the vCPU quota covers the fleet"]
    assert quota.status == "passed" and "192 free" in quota.detail
    err, made = registered(plain_program([]), account=shared_group(limit=192))
    assert isinstance(err, AccountError) and "96 of 192 vCPUs free" in err.problem
    assert made == []
