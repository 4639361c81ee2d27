"""A program composing GcpGpuFleet with its own network (Outputs as inputs) and an explicit
gcp.Provider (issue 20 items 1-3): every invoke and resource asks that provider, gpufleet
creates no network, and what it cannot honour is refused before anything is registered."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp
import pytest

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from gpufleet.components.gcp import GcpGpuFleet
from gpufleet.components.preview import Plan, evaluate
from gpufleet.components.validators import FakeAccount

NET = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
VM = "gcp:compute/instance:Instance"
NAT = "gcp:compute/routerNat:RouterNat"
FLEET = "gpufleet:index:GcpGpuFleet"
SSH = ["203.0.113.7/32"]


def _quota(metric: str, value: float, region: str | None = None) -> dict:
    """A quotaInfo in the Cloud Quotas API's shape (as tests/components/gcp/test_account_facts)."""
    return {
        "metric": f"compute.googleapis.com/{metric.lower()}",
        "quotaId": metric.replace("_", "-") + ("-per-project-region" if region else "-per-project"),
        "dimensions": ["region"] if region else [],
        "dimensionsInfos": [
            {
                "dimensions": {},
                "details": [{"value": str(value)}],
                "applicableLocations": [region] if region else ["global"],
            }
        ],
    }


def account() -> FakeAccount:
    """A project with no room for another network: a fleet that built one would be refused.
    getClientConfig is not answered here: the provider's own inputs answer it (gcp/mocks.py)."""
    return FakeAccount(
        invokes={
            "gcp:compute/getImage:getImage": lambda a: {"name": "dlvm-v1", "status": "READY"},
            "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos": lambda a: {
                "quotaInfos": [
                    _quota("NETWORKS", 0),
                    _quota("GPUS_ALL_REGIONS", 64),
                    _quota("NVIDIA_A100_GPUS", 16, "europe-west4"),
                    _quota("CPUS", 500, "europe-west4"),
                ]
            },
            "gcp:compute/getRouters:getRouters": lambda a: {"routers": []},
            "gcp:projects/getIamCustomRole:getIamCustomRole": lambda a: {},
        }
    )


def compose(built: list, **args) -> None:
    """The user's program: a provider, a network and subnet of its own, then the fleet."""
    eu = gcp.Provider("eu", project="team-proj", region="europe-west4")
    on_eu = pulumi.ResourceOptions(provider=eu)
    net = gcp.compute.Network("mine", auto_create_subnetworks=False, opts=on_eu)
    sub = gcp.compute.Subnetwork(
        "mine-sub", network=net.id, ip_cidr_range="10.9.0.0/20", region="europe-west4", opts=on_eu
    )
    fleet_args = {
        "instance_type": "a2-highgpu-8g",
        "nodes": 2,
        "vpc_id": net.id,
        "subnet_id": sub.id,
        "ssh_cidrs": SSH,
        **args,
    }
    built.append(GcpGpuFleet("train", fleet_args, opts=on_eu))


def run(with_account: bool = True, **args) -> tuple[Plan, GcpGpuFleet]:
    built: list = []

    def program():
        compose(built, **args)
        return {"nodes": built[0].nodes}

    return evaluate(program, account=account() if with_account else None), built[0]


def table(plan: Plan) -> str:
    rows = [("invoke", c.token, "", c.provider) for c in plan.calls]
    rows += [("resource", r.type, r.name, r.provider) for r in plan.resources]
    return "\n".join(" | ".join(str(v) for v in row) for row in rows)


def test_every_invoke_and_gcp_resource_asks_the_explicit_provider_and_no_network_is_built():
    plan, fleet = run()
    print("kind | token/type | name | provider")
    print(table(plan))
    assert plan.calls, "the validators asked the account"
    assert {c.provider for c in plan.calls} == {"eu"}, table(plan)
    gcp_resources = [r for r in plan.resources if r.type.startswith("gcp:")]
    assert {r.provider for r in gcp_resources} == {"eu"}, table(plan)
    # The only networks and subnets are the program's own, not the fleet's children.
    assert [r.name for r in plan.of_type(NET)] == ["mine"]
    assert [r.name for r in plan.of_type(SUBNET)] == ["mine-sub"]
    assert not [r for r in plan.resources if r.parent == "train" and r.type in (NET, SUBNET)]
    assert not plan.of_type(NAT)
    for vm in plan.of_type(VM):
        (nic,) = vm.inputs["networkInterfaces"]
        assert (nic["network"], nic["subnetwork"]) == ("mine-id", "mine-sub-id")
    # The provider's region and project: the zone, and what the validators asked.
    assert {vm.inputs["zone"] for vm in plan.of_type(VM)} == {"europe-west4-a"}
    quotas = [c for c in plan.calls if "getSQuotaInfos" in c.token]
    assert quotas and quotas[0].args["parent"] == "projects/team-proj"
    # The spec never holds an Output: the brought ids stay out of it.
    assert fleet.spec.vpc_id is None and fleet.spec.subnet_id is None
    checks = {c.fact: c for c in fleet.checks}
    quota = next(c for f, c in checks.items() if "quotas" in f)
    assert quota.status == "passed" and "NETWORKS" not in quota.detail  # needs none built
    nat = next(c for f, c in checks.items() if "Cloud NAT" in f)
    assert nat.status == "skipped" and "Outputs" in nat.detail and "public_workers" in nat.detail


def test_firewall_rules_on_the_users_network_are_the_clusters_own_tagged_and_described():
    """GCE firewall rules belong to a network: on one the user brings, gpufleet's two rules
    reach only the cluster's tagged VMs (gpufleet's own tag: test_shared_vpc.py), say whose
    they are, and go with the cluster."""
    plan, _ = run(with_account=False)
    rules = {r.name: r for r in plan.of_type(FIREWALL)}
    assert set(rules) == {"train-ssh", "train-internal"}
    (node,) = rules["train-internal"].inputs["targetTags"]
    for r in rules.values():
        assert r.inputs["network"] == "mine-id"
        assert r.parent == "train"  # deleted with the component
        assert "gpufleet cluster train" in r.inputs["description"]
        assert set(r.inputs["targetTags"]) <= {node, f"{node}-ssh"}
    assert rules["train-ssh"].inputs["sourceRanges"] == SSH
    assert rules["train-internal"].inputs["sourceTags"] == [node]
    assert "sourceRanges" not in rules["train-internal"].inputs


def test_a_region_other_than_the_providers_is_refused_before_anything_of_the_fleet():
    with pytest.raises(Exception) as caught:
        run(with_account=False, region="us-central1")
    err = _cause(caught.value, SpecError)
    assert err.field == "region" and "europe-west4" in err.problem and "eu" in err.problem


def test_a_zone_outside_the_providers_region_is_refused():
    with pytest.raises(Exception) as caught:
        run(with_account=False, zone="us-central1-a")
    assert _cause(caught.value, SpecError).field == "zone"


@pytest.mark.parametrize("drop", ["vpc_id", "subnet_id"])
def test_a_network_without_its_subnet_or_the_reverse_is_refused(drop):
    def program():
        eu = gcp.Provider("eu", project="team-proj", region="europe-west4")
        net = gcp.compute.Network("mine", opts=pulumi.ResourceOptions(provider=eu))
        args = {"instance_type": "a2-highgpu-8g", "ssh_cidrs": SSH}
        args["subnet_id" if drop == "vpc_id" else "vpc_id"] = net.id
        GcpGpuFleet("train", args, opts=pulumi.ResourceOptions(provider=eu))

    with pytest.raises(Exception) as caught:
        evaluate(program)
    assert _cause(caught.value, SpecError).field == drop


def test_a_plain_subnet_without_its_network_is_refused_in_the_spec():
    """The CLI's ClusterSpec: subnet_id alone would have been left unused for a new network."""
    with pytest.raises(SpecError) as caught:
        ClusterSpec.from_input(
            {"name": "c", "cloud": "gcp", "instance_type": "a2-highgpu-8g", "subnet_id": "s"}
        )
    assert caught.value.field == "vpc_id"


def _a3(built: list, gpu_count: int) -> None:
    eu = gcp.Provider("eu", project="team-proj", region="us-central1")
    on_eu = pulumi.ResourceOptions(provider=eu)
    nets = [gcp.compute.Network(f"gpu{k}", opts=on_eu) for k in range(gpu_count)]
    subs = [
        gcp.compute.Subnetwork(
            f"gpu{k}-sub", network=n.id, ip_cidr_range=f"10.8.{k}.0/24", opts=on_eu
        )
        for k, n in enumerate(nets)
    ]
    built.append(
        GcpGpuFleet(
            "a3",
            {
                "instance_type": "a3-highgpu-8g",
                "image": "projects/p/global/images/tcpx",
                "ssh_cidrs": SSH,
                "gpu_vpc_ids": [n.id for n in nets],
                "gpu_subnet_ids": [s.id for s in subs],
            },
            opts=on_eu,
        )
    )


def test_a3_gpu_networks_the_user_brings_are_used_and_none_is_built():
    built: list = []
    plan = evaluate(lambda: _a3(built, 4))
    fleet_nets = [r.name for r in plan.of_type(NET) if r.parent == "a3"]
    assert fleet_nets == ["a3-net"]  # the first NIC's, as none was brought
    assert not [r for r in plan.of_type(FIREWALL) if "gpu" in r.name]
    for vm in plan.of_type(VM):
        gpu_nics = vm.inputs["networkInterfaces"][1:]
        assert [(n["network"], n["subnetwork"]) for n in gpu_nics] == [
            (f"gpu{k}-id", f"gpu{k}-sub-id") for k in range(4)
        ]


def test_a3_gpu_networks_of_the_wrong_count_are_refused():
    with pytest.raises(Exception) as caught:
        evaluate(lambda: _a3([], 2))
    err = _cause(caught.value, SpecError)
    assert err.field == "gpu_vpc_ids" and "4 GPU NICs" in err.problem


def _cause(err: BaseException, kind: type) -> Any:
    while not isinstance(err, kind) and (err.__cause__ or err.__context__) is not None:
        err = err.__cause__ or err.__context__
    assert isinstance(err, kind), repr(err)
    return err
