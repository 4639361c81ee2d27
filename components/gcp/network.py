"""GCP fleet VPCs: primary network with SSH and internal firewalls, plus the A3 GPU networks."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.gcp.byo import UserNetworks, host_project

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

PRIMARY_CIDR = "10.43.0.0/20"
# A3 GPU NICs: one VPC and subnet each (Cluster Toolkit's multivpc layout, facts §2.5).
GPU_NET_MTU = 8244


def gpu_subnet_cidr(k: int) -> str:
    return f"10.44.{k}.0/24"


@dataclass
class Networks:
    network: Any  # self link or name
    subnetwork: Any
    gpu: list[tuple[Any, Any]]  # (network, subnetwork) per extra NIC
    tags: NodeTags  # the network tags the nodes carry, which the rules target
    built: bool = True  # False: the user's network and subnet (vpc_id and subnet_id)


@dataclass(frozen=True)
class NodeTags:
    """The network tags gpufleet's rules target: every node carries `node`, the VMs that take
    SSH from ssh_cidrs (the head, or all with public_workers) carry `ssh` too."""

    node: str
    ssh: str

    def of(self, public: bool) -> list[str]:
        return [self.node, self.ssh] if public else [self.node]


def ssh_tag(name: str) -> str:
    """The network tag of the VMs that take SSH from spec.ssh_cidrs, on the cluster's own
    network."""
    return f"{name}-ssh"


def own_tags(name: str) -> NodeTags:
    """On a network the cluster built: the bare name, unchanged for existing stacks (no other
    VM is on that network)."""
    return NodeTags(name, ssh_tag(name))


def brought_tags(name: str) -> NodeTags:
    """On a network the user brings, other VMs share it: a tag of gpufleet's that no VM carries
    by chance, `gpufleet-<cluster>-<8 hex>` of the Pulumi project, stack and cluster, fixed for
    the stack's life (a new hash would retag, in place, every node). At most 9 + 32 + 1 + 8 + 4
    = 54 characters, within GCE's 63 (RFC 1035). A name, not a secret: anyone who may set tags
    on a VM of the network can still copy it (docs/clouds.md, the trade-off)."""
    seed = f"{pulumi.get_project()}/{pulumi.get_stack()}/{name}"
    base = f"gpufleet-{name}-{hashlib.sha256(seed.encode()).hexdigest()[:8]}"
    return NodeTags(base, f"{base}-ssh")


def firewall_description(name: str, what: str) -> str:
    """Says on a rule, in the console of a network gpufleet may not own, whose rule it is."""
    return f"gpufleet cluster {name}: {what}; deleted with the cluster"


def build_networks(
    name: str,
    spec: ClusterSpec,
    extra_nics: int,
    opts: pulumi.ResourceOptions,
    region: str,
    brought: UserNetworks | None = None,
) -> Networks:
    """The nodes' networks: the user's where brought (`brought`), else the cluster's own.

    On a network the user brings, gpufleet adds its two rules for the first NIC (SSH to the
    head, all traffic between the nodes), each named for the cluster, limited to the cluster's
    own gpufleet tags (brought_tags) and deleted with it: GCE firewall rules belong to a network,
    and without them nothing reaches the nodes. They are made in the network's project (a
    Shared VPC's host project, from the network's or subnet's id), or not at all with
    `firewall_rules=False` (the network's owner makes them). The GPU networks a user brings get
    no rule of gpufleet's.
    """
    brought = brought or UserNetworks()
    if not brought.primary and spec.vpc_id and spec.subnet_id:
        brought = UserNetworks(spec.vpc_id, spec.subnet_id)
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    project: Any = None  # the provider's
    if brought.primary:
        network, subnetwork = brought.network, brought.subnetwork
        internal = None
        tags = brought_tags(name)
        # Firewall rules live in the network's project; created in the provider's (a Shared
        # VPC's service project) they would fail after the rest is registered.
        project = host_project(network, subnetwork)
    else:
        net = gcp.compute.Network(
            f"{name}-net", auto_create_subnetworks=False, mtu=GPU_NET_MTU, opts=opts
        )
        sub = gcp.compute.Subnetwork(
            f"{name}-subnet", network=net.id, ip_cidr_range=PRIMARY_CIDR, region=region, opts=opts
        )
        network, subnetwork = net.id, sub.id
        internal = PRIMARY_CIDR
        tags = own_tags(name)
    if brought.firewall_rules:
        _rules(name, spec, network, internal, tags, project, opts)
    built = internal is not None
    if brought.gpu:
        return Networks(network, subnetwork, list(brought.gpu), built=built, tags=tags)
    gpu = []
    for k in range(extra_nics):
        gnet = gcp.compute.Network(
            f"{name}-gpu{k}-net", auto_create_subnetworks=False, mtu=GPU_NET_MTU, opts=opts
        )
        gsub = gcp.compute.Subnetwork(
            f"{name}-gpu{k}-subnet",
            network=gnet.id,
            ip_cidr_range=gpu_subnet_cidr(k),
            region=region,
            opts=opts,
        )
        gcp.compute.Firewall(
            f"{name}-gpu{k}-internal",
            network=gnet.id,
            direction="INGRESS",
            allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
            source_ranges=[gpu_subnet_cidr(k)],
            opts=opts,
        )
        gpu.append((gnet.id, gsub.id))
    return Networks(network=network, subnetwork=subnetwork, gpu=gpu, built=built, tags=tags)


def _rules(
    name: str,
    spec: ClusterSpec,
    network: Any,
    internal: str | None,
    tags: NodeTags,
    project: Any,
    opts: pulumi.ResourceOptions,
) -> None:
    """The two rules of the first NIC's network: SSH from ssh_cidrs to the VMs tagged
    `tags.ssh`, all traffic between the VMs tagged `tags.node` (from the subnet's range on the
    cluster's own network; on a brought one, by tag rather than guessing its ranges)."""
    gcp.compute.Firewall(
        f"{name}-ssh",
        network=network,
        project=project,
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=["22"])],
        source_ranges=spec.ssh_cidrs,
        # Only VMs with this tag (the head, or every node with public_workers); workers
        # take SSH from the head through the internal rule below.
        target_tags=[tags.ssh],
        description=firewall_description(name, "SSH from ssh_cidrs to its tagged nodes"),
        opts=opts,
    )
    gcp.compute.Firewall(
        f"{name}-internal",
        network=network,
        project=project,
        direction="INGRESS",
        allows=[gcp.compute.FirewallAllowArgs(protocol="all")],
        source_ranges=[internal] if internal else None,
        source_tags=None if internal else [tags.node],
        target_tags=[tags.node],
        description=firewall_description(name, "all traffic between its nodes"),
        opts=opts,
    )


def worker_nat(name: str, network: Any, region: str, opts: pulumi.ResourceOptions) -> Any:
    """Cloud NAT for the VMs without an external IP (the workers), so their recipe can fetch
    packages. Cloud NAT serves only VMs without one; the head keeps its own address."""
    router = gcp.compute.Router(f"{name}-router", network=network, region=region, opts=opts)
    return gcp.compute.RouterNat(
        f"{name}-nat",
        router=router.name,
        region=region,
        nat_ip_allocate_option="AUTO_ONLY",
        source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
        opts=opts,
    )
