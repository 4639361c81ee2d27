"""What the AWS account must hold before a fleet is made: quotas, the image, subnet egress."""

from __future__ import annotations

import ipaddress
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pulumi_aws as aws

from gpufleet.components.aws.network import (
    DEFAULT_GROUPS_PER_INTERFACE,
    MAX_GROUPS_PER_INTERFACE,
    aws_region,
    brings_network,
    groups_counted,
    groups_per_interface,
    user_network,
)
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.validators import Unanswered, Validator, refuse

if TYPE_CHECKING:
    from gpufleet.components.catalog import InstanceType
    from gpufleet.components.clusterspec import ClusterSpec

# EC2's vCPU quotas by instance family letter, on-demand and spot (Service Quotas, service
# code ec2; "On-Demand Instance quotas" and "Spot Instance quotas" in the EC2 user guide,
# ec2-on-demand-instances.html#ec2-on-demand-instances-limits, and using-spot-limits.html).
VCPU_QUOTAS: dict[str, dict[bool, tuple[str, str]]] = {
    "p": {
        False: ("L-417A185B", "Running On-Demand P instances"),
        True: ("L-7212CCBC", "All P Spot Instance Requests"),
    },
    "g": {
        False: ("L-DB2E81BA", "Running On-Demand G and VT instances"),
        True: ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    },
}
# Amazon VPC quotas (vpc/latest/userguide/amazon-vpc-limits.html) and EC2's Elastic IP quota.
VPC_QUOTA = ("vpc", "L-F678F1CE", "VPCs per Region")
EIP_QUOTA = ("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")
GROUPS_QUOTA = ("vpc", "L-2AFB9258", "Security groups per network interface")
# "Each AWS account can have up to a maximum of 5,000 launch templates per Region ... Your
# accounts might have different quotas based on their age and usage history" (EC2 user guide,
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/launch-template-restrictions.html, read
# 2026-11-26). The page points to the Service Quotas console, but no quota code for it was
# found to ask (GetServiceQuota needs one): the documented maximum.
LAUNCH_TEMPLATES_PER_REGION = 5000
# A 0.0.0.0/0 route through one of these gives a subnet without public addresses the internet
# (dstack's aws/resources.py _is_private_subnet_with_internet_egress takes the same three).
PRIVATE_EGRESS = ("nat_gateway_id", "transit_gateway_id", "vpc_peering_connection_id")


def _num(v: Any) -> int:
    return int(float(v or 0))  # a protobuf number arrives as a float


def _increase(service: str, code: str, name: str, need: int, region: str) -> str:
    return (
        f"ask for at least {need} in the Service Quotas console ({name}, {code}) or run "
        f"`aws service-quotas request-service-quota-increase --service-code {service} "
        f"--quota-code {code} --desired-value {need} --region {region}`"
    )


def _quota(service: str, code: str, region: str) -> int:
    found = aws.servicequotas.get_service_quota(
        service_code=service, quota_code=code, region=region, opts=lookup_opts()
    )
    return _num(found.value)


# The instance types each quota counts, as EC2 filter patterns (instance-type accepts `*`).
QUOTA_TYPES = {"p": ["p*"], "g": ["g*", "vt*"]}
LIVE = ["pending", "running"]


def _instance_ids(region: str, types: list[str], spot: bool | None = None) -> set[str]:
    filters = [aws.ec2.GetInstancesFilterArgs(name="instance-type", values=types)]
    if spot:
        filters.append(aws.ec2.GetInstancesFilterArgs(name="instance-lifecycle", values=["spot"]))
    found = aws.ec2.get_instances(
        filters=filters, instance_state_names=LIVE, region=region, opts=lookup_opts()
    )
    return set(found.ids or [])


def vcpus_in_use(family: str, spot: bool, region: str) -> int:
    """vCPUs of the family's pending and running instances of this market (spot, or not spot),
    which the same quota already counts: another cluster, a notebook, a bake.

    DescribeInstances gives the ids, each instance its type, DescribeInstanceTypes each distinct
    type's DefaultVCpus (once per type)."""
    types = QUOTA_TYPES[family]
    spot_ids = _instance_ids(region, types, spot=True)
    ids = spot_ids if spot else _instance_ids(region, types) - spot_ids
    per_type: dict[str, int] = {}
    total = 0
    for i in sorted(ids):
        t = aws.ec2.get_instance(instance_id=i, region=region, opts=lookup_opts()).instance_type
        if t not in per_type:
            per_type[t] = _num(
                aws.ec2.get_instance_type(
                    instance_type=t, region=region, opts=lookup_opts()
                ).default_vcpus
            )
        total += per_type[t]
    return total


def _vcpus(spec: ClusterSpec, it: InstanceType) -> str | None:
    family = it.name[:1]
    quotas = VCPU_QUOTAS.get(family)
    if quotas is None:
        return None
    code, name = quotas[spec.spot]
    region = aws_region(spec)
    have, need = _quota("ec2", code, region), spec.nodes * it.vcpus
    if spec.capacity_block:
        # Not confirmed either way in EC2's docs whether a Capacity Block's instances count
        # against the on-demand vCPU quota; the block itself was bought for this capacity.
        return (
            f"{name} {have} vCPUs, need {need}: not enforced for a Capacity Block (unconfirmed "
            "whether its instances count against this quota)"
        )
    used = vcpus_in_use(family, spec.spot, region)
    if have - used < need:
        raise refuse(
            VCPUS,
            f"{name} ({code}) is {have} vCPUs in {region}, {used} of them in use by pending or "
            f"running instances; {spec.nodes} × {it.name} need {need} (new accounts often have "
            "0 for P instances: EC2 would answer VcpuLimitExceeded after the network exists)",
            _increase("ec2", code, name, used + need, region)
            + (", or end the instances that use it" if used else ""),
        )
    return f"{name} {have} vCPUs, {used} in use, need {need}"


VCPUS = Validator(
    "aws",
    "the vCPU quota of the instance family holds every node",
    "Service Quotas GetServiceQuota (ec2) + EC2 DescribeInstances, DescribeInstanceTypes",
    _vcpus,
    "P and G instances (on-demand, or spot with spot: true)",
)


def creates_network(spec: ClusterSpec) -> bool:
    """gpufleet makes the VPC: the spec names none, and the program brings none (its ids may
    be Outputs, which stay out of the spec: components/aws/network.py user_network)."""
    return not brings_network(spec)


def _vpcs(spec: ClusterSpec, it: InstanceType) -> str | None:
    if not creates_network(spec):
        return None
    region = aws_region(spec)
    service, code, name = VPC_QUOTA
    have = _quota(service, code, region)
    used = len(aws.ec2.get_vpcs(region=region, opts=lookup_opts()).ids or [])
    if used + 1 > have:
        raise refuse(
            VPCS,
            f"{name} ({code}) is {have} in {region} and {used} exist; the cluster makes 1 more",
            _increase(service, code, name, used + 1, region)
            + ", or reuse a VPC: give vpc_id and subnet_id (a subnet routing 0.0.0.0/0 to NAT "
            "and ssh_cidrs to the internet gateway)",
        )
    return f"{name} {have}, {used} in use, need 1 more"


VPCS = Validator(
    "aws",
    "the VPC quota has room for the cluster's VPC",
    "Service Quotas GetServiceQuota (vpc) + EC2 DescribeVpcs",
    _vpcs,
    "when the cluster makes its own VPC (no vpc_id/subnet_id)",
)


def eips_needed(spec: ClusterSpec, it: InstanceType) -> int:
    """Elastic IPs the fleet allocates (components/aws/fleet.py, network.py)."""
    public = spec.nodes if spec.public_workers else 1
    nodes = public if it.efa_interfaces > 1 else 0
    nat = creates_network(spec) and not (spec.public_workers or spec.nodes == 1)
    return nodes + (1 if nat else 0)


def _eips(spec: ClusterSpec, it: InstanceType) -> str | None:
    need = eips_needed(spec, it)
    if need == 0:
        return None
    region = aws_region(spec)
    service, code, name = EIP_QUOTA
    have = _quota(service, code, region)
    used = len(aws.ec2.get_eips(region=region, opts=lookup_opts()).allocation_ids or [])
    if used + need > have:
        raise refuse(
            EIPS,
            f"{name} ({code}) is {have} in {region} and {used} are allocated; the cluster "
            f"allocates {need} more",
            _increase(service, code, name, used + need, region)
            + ", or release Elastic IPs you no longer use",
        )
    return f"{name} {have}, {used} allocated, need {need} more"


EIPS = Validator(
    "aws",
    "the Elastic IP quota has room for the cluster's addresses",
    "Service Quotas GetServiceQuota (ec2) + EC2 DescribeAddresses",
    _eips,
    "when the cluster allocates Elastic IPs (multi-card head, NAT gateway)",
)


def image_ref(spec: ClusterSpec) -> str:
    from gpufleet.components.aws.fleet import image_id

    return image_id(spec.image)


def resolve_ami(spec: ClusterSpec) -> str:
    """The AMI id the stack's image names now (an SSM parameter read, or the id itself)."""
    ref = image_ref(spec)
    if ref.startswith("resolve:ssm:"):
        name = ref[len("resolve:ssm:") :]
        try:
            return aws.ssm.get_parameter(
                name=name, region=aws_region(spec), opts=lookup_opts()
            ).value
        except Exception as e:  # the provider's error: ParameterNotFound, access denied
            raise refuse(
                IMAGE,
                f"the SSM parameter {name} does not resolve ({str(e).splitlines()[0]})",
                "give an existing parameter or an AMI id as image",
            ) from None
    return ref


def _image(spec: ClusterSpec, it: InstanceType) -> str | None:
    ami = resolve_ami(spec)
    region = aws_region(spec)
    try:
        found = aws.ec2.get_ami(
            filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[ami])],
            include_deprecated=True,  # found, so that a deprecated image is named as such
            region=region,
            opts=lookup_opts(),
        )
    except Exception as e:
        raise refuse(
            IMAGE,
            f"{ami} is not an AMI this account can launch in {region} ({str(e).splitlines()[0]})",
            "give an AMI id of this region, or leave image unset for the current DLAMI",
        ) from None
    if found.state and found.state != "available":
        raise refuse(IMAGE, f"{ami} is {found.state}, not available", "give an available AMI id")
    kind = aws.ec2.get_instance_type(instance_type=it.name, region=region, opts=lookup_opts())
    archs = list(kind.supported_architectures or [])
    if found.architecture and archs and found.architecture not in archs:
        raise refuse(
            IMAGE,
            f"{ami} ({found.name}) is {found.architecture}; {it.name} runs {', '.join(archs)}",
            f"give an AMI built for {archs[0]}",
        )
    root = _root_size(found)
    if root and spec.disk_gb < root:
        raise refuse(
            IMAGE,
            f"{ami}'s root snapshot is {root} GiB; disk_gb {spec.disk_gb} is smaller (EC2 refuses "
            "a root volume smaller than its snapshot)",
            f"set disk_gb to at least {root}",
        )
    detail = f"{ami} ({found.name}) available, {found.architecture or 'arch unknown'}, root "
    detail += f"device {found.root_device_name}" + (f" ({root} GiB snapshot)" if root else "")
    gone = found.deprecation_time
    if gone and datetime.fromisoformat(gone.replace("Z", "+00:00")) <= datetime.now(timezone.utc):
        # A deprecated AMI still launches by its id (ami-deprecate.html); only its listing goes.
        detail += f"; warning: deprecated since {gone}, still launchable by id (pick a current AMI)"
    return detail


def _root_size(found: Any) -> int:
    """GiB of the AMI's root snapshot (its block device mapping at the root device), or 0."""
    for m in found.block_device_mappings or []:
        get = m.get if isinstance(m, dict) else lambda k, m=m: getattr(m, k, None)
        ebs = get("ebs") or {}
        if get("device_name") == found.root_device_name and ebs:
            return _num(ebs.get("volume_size"))
    return 0


IMAGE = Validator(
    "aws",
    "the image resolves to an available AMI of the type's architecture that fits disk_gb",
    "SSM GetParameter + EC2 DescribeImages, DescribeInstanceTypes",
    _image,
)


def _route_table(spec: ClusterSpec) -> Any:
    """The subnet's route table: its own association, else the VPC's main table (a subnet
    without an explicit association uses the main one: VPC user guide, route tables)."""
    region = aws_region(spec)

    def tables(name: str, value: str) -> list[str]:
        found = aws.ec2.get_route_tables(
            vpc_id=spec.vpc_id,
            filters=[aws.ec2.GetRouteTablesFilterArgs(name=name, values=[value])],
            region=region,
            opts=lookup_opts(),
        )
        return list(found.ids or [])

    ids = tables("association.subnet-id", spec.subnet_id or "") or tables(
        "association.main", "true"
    )
    if not ids:
        raise refuse(
            EGRESS,
            f"VPC {spec.vpc_id} has no route table for subnet {spec.subnet_id}",
            "check vpc_id and subnet_id name one VPC and a subnet of it",
        )
    return aws.ec2.get_route_table(route_table_id=ids[0], region=region, opts=lookup_opts())


def _field(route: Any, name: str) -> str:
    return (route.get(name) if isinstance(route, dict) else getattr(route, name, "")) or ""


def _routes_v4(table: Any) -> list[tuple[ipaddress.IPv4Network, Any]]:
    """The table's IPv4 CIDR routes (prefix-list and IPv6 routes carry no IPv4 CIDR)."""
    found = []
    for r in table.routes or []:
        cidr = _field(r, "cidr_block")
        if cidr:
            net = ipaddress.ip_network(cidr, strict=False)
            if isinstance(net, ipaddress.IPv4Network):
                found.append((net, r))
    return found


def _target(route: Any) -> str:
    for key in ("gateway_id", "nat_gateway_id", "transit_gateway_id", "vpc_peering_connection_id",
                "network_interface_id", "vpc_endpoint_id", "local_gateway_id",
                "carrier_gateway_id", "core_network_arn"):  # fmt: skip
        if _field(route, key):
            return _field(route, key)
    return "?"


def _via_igw(route: Any) -> bool:
    return _field(route, "gateway_id").startswith("igw-")


def ssh_reply_problems(routes: list[tuple[Any, Any]], cidrs: list[str]) -> list[str]:
    """Each IPv4 SSH client CIDR whose replies would not all leave through an internet gateway.

    Replies to a client take the longest-prefix route matching its address (VPC user guide,
    route-tables-priority.html): the most specific route covering the whole CIDR must go to an
    igw-, and so must every more specific route inside it. IPv6 CIDRs are not checked:
    gpufleet gives the nodes no IPv6 address."""
    problems = []
    for cidr in cidrs:
        c = ipaddress.ip_network(cidr, strict=False)
        if not isinstance(c, ipaddress.IPv4Network):
            continue
        covering = [(n, r) for n, r in routes if c.subnet_of(n)]
        inner = [(n, r) for n, r in routes if n != c and n.subnet_of(c) and not _via_igw(r)]
        if not covering:
            problems.append(f"{cidr} has no route")
        else:
            best, route = max(covering, key=lambda nr: nr[0].prefixlen)
            if not _via_igw(route):
                problems.append(f"{cidr} goes through {_target(route)} (route {best})")
        problems += [f"{n} (in {cidr}) goes through {_target(r)}" for n, r in inner]
    return problems


def _egress(spec: ClusterSpec, it: InstanceType) -> str | None:
    """Which layouts of a given subnet's route table pass (the head's public address is in
    the same subnet as the workers, so its SSH replies leave through this table too):

    - every node public (public_workers, or one node): 0.0.0.0/0 to an igw-;
    - private workers: 0.0.0.0/0 to a NAT gateway (or transit gateway / peering) for the
      workers, AND a route to an igw- for each IPv4 ssh_cidr (as gpufleet's own network has);
    - either way each ssh_cidr's most specific route goes to an igw- (a NAT route would send
      the head's replies out from the NAT's address and the client drops them).
    With replacement security_group_ids (no ssh_cidrs) the clients are unknown: private workers
    then need at least one route to an igw- besides the NAT default, and the detail names the
    CIDRs it covers (your groups' SSH sources must lie within them)."""
    if creates_network(spec):
        return None
    if not (spec.vpc_id and spec.subnet_id):
        raise Unanswered(
            "the program's subnet id is a pulumi Output (not known before its own resources "
            "exist); its route to the internet is yours to give: 0.0.0.0/0 through a NAT "
            "gateway for private workers, and a route to the internet gateway for each "
            "ssh_cidr (the head's Elastic IP replies through this subnet's route table)"
        )
    table = _route_table(spec)
    routes = _routes_v4(table)
    default = [r for n, r in routes if n.prefixlen == 0]
    private_workers = spec.nodes > 1 and not spec.public_workers
    where = f"subnet {spec.subnet_id}'s route table {table.id}"
    leave = "or drop vpc_id/subnet_id to let gpufleet make a VPC that routes both"
    if private_workers:
        want = "a NAT gateway (or a transit gateway / peering)"
        ok = [r for r in default if any(_field(r, k) for k in PRIVATE_EGRESS)]
    else:
        want = "an internet gateway"
        ok = [r for r in default if _via_igw(r)]
    if not ok:
        raise refuse(
            EGRESS,
            f"{where} has no 0.0.0.0/0 route to {want}"
            + (
                "; workers have no public address and would reach nothing"
                if private_workers
                else ""
            ),
            f"add a 0.0.0.0/0 route to {want} in that route table, give another subnet_id, "
            + (
                "set public_workers: true (every node gets a public address), "
                if private_workers
                else ""
            )
            + leave,
        )
    groups = user_network()
    if groups is not None and groups.groups is not None and not spec.ssh_cidrs:
        igw = [str(n) for n, r in routes if _via_igw(r)]
        if private_workers and not igw:
            raise refuse(
                EGRESS,
                f"{where} sends 0.0.0.0/0 to {_target(ok[0])} and has no route to an internet "
                "gateway: the head's SSH replies would leave through NAT, from another address",
                "add a route to the VPC's internet gateway for the addresses your security "
                "groups let SSH in from, set public_workers: true, or " + leave[3:],
            )
        return (
            f"{spec.subnet_id}: 0.0.0.0/0 through {want} ({table.id}); SSH replies through "
            f"an internet gateway to {', '.join(igw)} (your security groups' SSH sources must "
            "lie within them: not checked)"
        )
    bad = ssh_reply_problems(routes, spec.ssh_cidrs)
    if bad:
        raise refuse(
            EGRESS,
            f"{where} would not send the head's SSH replies through an internet gateway: "
            + "; ".join(bad)
            + " (the head's public address is in this subnet; a reply through NAT leaves from "
            "another address and the SSH client drops it)",
            "add a route to the VPC's internet gateway (igw-...) for each ssh_cidr in that "
            "route table"
            + (
                ", or set public_workers: true with a 0.0.0.0/0 route to the internet gateway"
                if private_workers
                else ""
            )
            + ", "
            + leave,
        )
    v4 = [c for c in spec.ssh_cidrs if ipaddress.ip_network(c, strict=False).version == 4]
    return (
        f"{spec.subnet_id}: 0.0.0.0/0 through {want} ({table.id}); SSH replies to "
        f"{', '.join(v4) or 'no IPv4 ssh_cidrs'} through an internet gateway"
    )


EGRESS = Validator(
    "aws",
    "the given subnet reaches the internet (NAT for workers without a public address) and "
    "routes the head's SSH replies through an internet gateway",
    "EC2 DescribeRouteTables",
    _egress,
    "when the spec names an existing vpc_id/subnet_id",
)


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _reservation(spec: ClusterSpec, it: InstanceType) -> str | None:
    """The reservation holds the fleet: its type, zone, state, free count and placement group
    (as ParallelCluster's CapacityReservationValidator and
    PlacementGroupCapacityReservationValidator compare them)."""
    if not spec.reservation:
        return None
    region, cr = aws_region(spec), spec.reservation
    try:
        # Answers only reservations of type capacity-block (DescribeCapacityReservations).
        r: Any = aws.ec2.get_capacity_block_reservation(id=cr, region=region, opts=lookup_opts())
        why = "" if r.instance_type else "no such Capacity Block"
    except Exception as e:
        r, why = None, _first_line(e)
    if why:
        if spec.capacity_block:
            raise refuse(
                RESERVATION,
                f"{cr} is not a Capacity Block this account holds in {region} ({why})",
                "give the block's cr-... id (aws ec2 describe-capacity-reservations "
                "--filters Name=reservation-type,Values=capacity-block), or drop capacity_block "
                "for an On-Demand Capacity Reservation",
            ) from None
        raise Unanswered(
            f"{cr} is not a Capacity Block, and pulumi_aws reads On-Demand Capacity "
            "Reservations with no data source; EC2 refuses at launch if it does not match"
        ) from None
    if not spec.capacity_block:
        raise refuse(
            RESERVATION,
            f"{cr} is a Capacity Block, but capacity_block is false (EC2 launches into a block "
            "only with market type capacity-block)",
            "set capacity_block: true",
        )
    problems = []
    if r.instance_type != it.name:
        problems.append(f"it reserves {r.instance_type}, not {it.name}")
    if spec.zone and r.availability_zone != spec.zone:
        of_subnet = f" (subnet {spec.subnet_id}'s)" if spec.subnet_id else ""
        problems.append(f"it is in {r.availability_zone}, not zone {spec.zone}{of_subnet}")
    if r.state != "active":
        problems.append(f"it is {r.state} (from {r.start_date} to {r.end_date}), not active")
    free = _num(r.available_instance_count)
    if free < spec.nodes:
        problems.append(
            f"{free} of its {_num(r.instance_count)} instances are free, not {spec.nodes}"
        )
    group = (r.placement_group_arn or "").rsplit("/", 1)[-1] if r.placement_group_arn else ""
    if group and group != spec.placement_group:
        problems.append(
            f"it was made in placement group {group}, and the fleet launches "
            + (f"into {spec.placement_group}" if spec.placement_group else "into none")
        )
    if problems:
        raise refuse(
            RESERVATION,
            f"{cr}: " + "; ".join(problems),
            "give a reservation that matches (instance type, zone, free count"
            + (f", placement_group: {group}" if group else "")
            + "), or change the spec to it",
        )
    where = f", placement group {group}" if group else ""
    return f"{cr}: {r.instance_type} in {r.availability_zone}, active, {free} free{where}"


RESERVATION = Validator(
    "aws",
    "the capacity reservation holds the fleet (type, zone, state, free count, placement group)",
    "EC2 DescribeCapacityReservations (Capacity Blocks)",
    _reservation,
    "with a reservation (On-Demand Capacity Reservations: skipped, no data source)",
)


def _efa(spec: ClusterSpec, it: InstanceType) -> str | None:
    if it.fabric != "efa":
        return None
    kind = aws.ec2.get_instance_type(
        instance_type=it.name, region=aws_region(spec), opts=lookup_opts()
    )
    if not kind.efa_supported:
        raise refuse(
            EFA,
            f"EC2 says {it.name} does not support EFA (DescribeInstanceTypes EfaSupported false)",
            "pick an EFA type (p4d, p5, ...) or report the catalog entry as wrong",
        )
    return f"{it.name} supports EFA"


EFA = Validator(
    "aws",
    "the instance type supports EFA, as its fabric needs",
    "EC2 DescribeInstanceTypes",
    _efa,
    "types whose fabric is efa",
)


def _groups_per_interface(spec: ClusterSpec, it: InstanceType) -> str | None:
    net = user_network()
    count = groups_per_interface(net)
    if count <= DEFAULT_GROUPS_PER_INTERFACE:
        return None  # within the default quota, which no account has less of
    region = aws_region(spec)
    service, code, name = GROUPS_QUOTA
    have = _quota(service, code, region)
    if count > have:
        raise refuse(
            GROUPS_PER_INTERFACE,
            f"{name} ({code}) is {have} in {region}; the head's primary interface would carry "
            f"{count} ({groups_counted(net)}), and EC2 would refuse the launch after the "
            "templates exist",
            _increase(service, code, name, count, region)
            + f" (at most {MAX_GROUPS_PER_INTERFACE}), or pass fewer extra_security_group_ids, "
            "or security_group_ids that replace gpufleet's own groups",
        )
    return f"{name} {have}, the busiest interface carries {count}"


GROUPS_PER_INTERFACE = Validator(
    "aws",
    "every node interface's security groups fit the per-interface quota",
    "Service Quotas GetServiceQuota (vpc)",
    _groups_per_interface,
    f"when an interface would carry more than {DEFAULT_GROUPS_PER_INTERFACE} security groups",
)


def launch_templates_tagged(region: str) -> int:
    """Launch templates of the region the Resource Groups Tagging API lists: those that have
    (or had) a tag. pulumi_aws has no data source for DescribeLaunchTemplates, which lists all;
    this is a floor of the region's count, never more than it."""
    try:
        found = aws.resourcegroupstaggingapi.get_resources(
            resource_type_filters=["ec2:launch-template"], region=region, opts=lookup_opts()
        )
    except Exception as e:  # the provider's error: tag:GetResources denied
        raise Unanswered(
            f"the tagging API did not list the launch templates ({_first_line(e)})"
        ) from None
    return len(found.resource_tag_mapping_lists or [])


def _launch_templates(spec: ClusterSpec, it: InstanceType) -> str | None:
    region = aws_region(spec)
    used = launch_templates_tagged(region)
    need = spec.nodes  # one per node (fleet.py: the user data and the head's NIC differ)
    limit = LAUNCH_TEMPLATES_PER_REGION
    if used + need > limit:
        raise refuse(
            LAUNCH_TEMPLATES,
            f"{region} holds at least {used} launch templates (the tagged ones) and the cluster "
            f"makes {need} more, one per node; EC2 allows {limit} per Region and would refuse "
            "CreateLaunchTemplate after the network exists",
            "delete launch templates no longer used (`aws ec2 describe-launch-templates "
            f"--region {region}`, then `aws ec2 delete-launch-template`), use another region, "
            f"or fewer nodes (room for {max(limit - used, 0)})",
        )
    return (
        f"at least {used} of {limit} launch templates in {region} (tagged ones; untagged are "
        f"not listed), the cluster makes {need}"
    )


LAUNCH_TEMPLATES = Validator(
    "aws",
    "the region's launch templates have room for one per node",
    "Resource Groups Tagging API GetResources (ec2:launch-template; tagged templates only)",
    _launch_templates,
)

VALIDATORS = [
    VCPUS,
    VPCS,
    EIPS,
    LAUNCH_TEMPLATES,
    IMAGE,
    EFA,
    GROUPS_PER_INTERFACE,
    EGRESS,
    RESERVATION,
]
