"""`AwsGpuFleetArgs`: the typed inputs of `gpufleet:index:AwsGpuFleet`."""

import pulumi

from gpufleet.components.fleetargs import FleetArgs


class AwsGpuFleetArgs(FleetArgs, total=False):
    """Inputs of an AWS GPU fleet (p4d/p5 with EFA, g5/g6).

    Bring your own network as pulumi-eks does (`vpcId`, `nodeSubnetIds`,
    `extraNodeSecurityGroups`): `vpc_id` with `subnet_ids`, and optionally security groups.
    These ids may be Outputs of the program's own resources; how many subnets and groups there
    are must be known (a list, each item may be an Output)."""

    placement_group: str
    """With a reservation: the existing cluster placement group it was made in."""
    capacity_block: bool
    """The reservation is a Capacity Block for ML (market type capacity-block)."""
    vpc_id: pulumi.Input[str]
    """An existing VPC to create the nodes in (needs `subnet_ids`); default: a VPC of the
    cluster's own, with its subnet, internet gateway, NAT gateway and routes."""
    subnet_ids: list[pulumi.Input[str]]
    """Existing subnets of `vpc_id`. Every node goes in the FIRST one: a cluster placement group
    and EFA keep a fleet in one availability zone and one subnet. Any further subnets are not
    used (a warning names them), so a program can pass its VPC's private subnet list. The head's
    public address is in that subnet too, so its route table must send 0.0.0.0/0 through a NAT
    gateway for workers without public addresses AND each `ssh_cidrs` entry to the internet
    gateway (else the head's SSH replies leave through NAT and fail); with `public_workers`,
    0.0.0.0/0 to the internet gateway. A plain id is read before anything is registered: its
    VPC must be `vpc_id`, its zone is the fleet's (`zone`, if given, must match)."""
    subnet_id: pulumi.Input[str]
    """One existing subnet of `vpc_id`: the same as `subnet_ids: [subnet_id]` (the stack config
    and CLI name it so)."""
    extra_security_group_ids: list[pulumi.Input[str]]
    """Security groups of `vpc_id` added to every interface of every node, beside the groups
    gpufleet makes (or those of `security_group_ids`). The head's primary interface carries
    gpufleet's two groups (or yours) plus these: at most the account's "Security groups per
    network interface" quota (default 5, at most 16)."""
    security_group_ids: list[pulumi.Input[str]]
    """Security groups of `vpc_id` that REPLACE gpufleet's own: then it makes none, and these
    groups must allow all traffic in and out between the nodes (EFA needs a group that allows
    all inbound and outbound traffic to and from itself), SSH (tcp 22) to the head from where
    you connect, and egress to the internet for packages. `ssh_cidrs` is then not used."""
