"""AWS's own rules on a spec, checked before anything is declared: pure, no SDK."""

from __future__ import annotations

import ipaddress
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

# Broader than this, an SSH CIDR routed to the internet gateway would take most of the
# internet away from the NAT gateway the workers depend on.
WIDEST_SSH_PREFIX = 8
# Instance tag keys when tags are in instance metadata, as the fleet's are (the node reads its
# expiry there): letters, digits and + - = . , _ : @, not only "." or "..", not "_index"
# (EC2 user guide, Using_Tags.html, "Tag restrictions").
IMDS_TAG_KEY = re.compile(r"[A-Za-z0-9+\-=.,_:@]+")
IMDS_TAG_KEY_RESERVED = (".", "..", "_index")


def spec_rules(spec: ClusterSpec) -> None:
    _tag_keys(spec)
    _ssh_cidrs(spec)


def _tag_keys(spec: ClusterSpec) -> None:
    """Refuse tag keys EC2 rejects on an instance whose tags are in instance metadata."""
    for key in spec.tags:
        if IMDS_TAG_KEY.fullmatch(key) and key not in IMDS_TAG_KEY_RESERVED:
            continue
        raise SpecError(
            "tags",
            f"{key!r} is not a tag key EC2 takes on these instances: their tags are in instance "
            "metadata (the node reads its expiry there), and then a key may only use letters, "
            "digits and + - = . , _ : @ (no spaces or /), and may not be only . or .., or _index",
            f"rename it, e.g. {re.sub(r'[^A-Za-z0-9+=.,_:@-]', '-', key)!r}",
        )


def _ssh_cidrs(spec: ClusterSpec) -> None:
    """Refuse SSH CIDRs so wide that workers behind NAT would lose the internet."""
    if spec.public_workers or spec.nodes == 1:
        return
    for cidr in spec.ssh_cidrs:
        net = ipaddress.ip_network(cidr)
        if net.version == 4 and net.prefixlen < WIDEST_SSH_PREFIX:
            raise SpecError(
                "ssh_cidrs",
                f"{cidr} is too wide: the fleet subnet routes SSH clients' addresses to the "
                "internet gateway (so the head answers from its Elastic IP), and workers, which "
                "have no public address, would then reach that part of the internet through "
                "nothing (no apt, no EFA installer)",
                "list the addresses that SSH in (e.g. 203.0.113.7/32), or set "
                "public_workers: true to give every node its own public address",
            )


def _node(text: str) -> str:
    """The node a failed create names ("aws:ec2:Instance (c-node-1): ..."), or ""."""
    found = re.search(r"-node-(\d+)\b", text)
    return f"node-{found.group(1)}" if found else ""


def explain_failure(text: str) -> tuple[str, str] | None:
    """A plain account of an EC2 error gpufleet knows, as (problem, fix)."""
    node = _node(text)
    if "VcpuLimitExceeded" in text:
        return (
            "the account's vCPU quota for this instance family is below what the fleet needs "
            "(VcpuLimitExceeded; new accounts often have 0 vCPUs for P instances)",
            "ask for more in the Service Quotas console (Running On-Demand P instances "
            "L-417A185B, G and VT L-DB2E81BA; spot: L-7212CCBC, L-3819A6DF) or with "
            "`aws service-quotas request-service-quota-increase --service-code ec2 "
            "--quota-code CODE --desired-value VCPUS`",
        )
    if "InsufficientInstanceCapacity" in text:
        return (
            f"EC2 had no capacity for {node or 'a node'} in the cluster placement group "
            "(InsufficientInstanceCapacity): gpufleet launches one node per request, so the "
            "nodes before it may have started; AWS recommends launching a placement group's "
            "instances in one request, and retrying later, or in another zone",
            "run again later, list other zones (zones: [...]), use spot, or capacity you hold "
            "(reservation: cr-...)",
        )
    if "AddressLimitExceeded" in text:
        return (
            "the region's Elastic IP quota is used up (AddressLimitExceeded): each cluster "
            "takes one for its head and one for its NAT gateway; the default is 5 per region",
            "release unused Elastic IPs, or ask for more (Service Quotas, EC2-VPC Elastic IPs "
            "L-0263D0A3: `aws service-quotas request-service-quota-increase --service-code ec2 "
            "--quota-code L-0263D0A3 --desired-value N`)",
        )
    if "VpcLimitExceeded" in text:
        return (
            "the region's VPC quota is used up (VpcLimitExceeded): each cluster makes its own "
            "VPC; the default is 5 per region",
            "reuse a VPC (vpc_id and subnet_id: docs/clouds.md says its routes), remove unused "
            "ones, or ask for more (Service Quotas, VPCs per Region L-F678F1CE, service code vpc)",
        )
    return None


def refuse_extension(expiry: float, wanted: float) -> tuple[str, str] | None:
    """(problem, fix) when `wanted` is past the hard expiry the stack's EventBridge Scheduler
    schedule terminates the instances at (components/aws/backstop.py), else None."""
    if wanted <= expiry:
        return None
    when = datetime.fromtimestamp(int(expiry), timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"EventBridge Scheduler terminates the instances at the stack's hard expiry, {when}, "
        "whatever the nodes are told",
        f"extend to at most {when}, or apply the stack again with a longer ttl_minutes (on "
        "AWS that moves the schedule and the instances' expiry tags in place, replacing no node)",
    )
