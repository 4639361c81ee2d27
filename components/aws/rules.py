"""AWS's own rules on a spec, checked before anything is declared: pure, no SDK."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

# Broader than this, an SSH CIDR routed to the internet gateway would take most of the
# internet away from the NAT gateway the workers depend on.
WIDEST_SSH_PREFIX = 8


def spec_rules(spec: ClusterSpec) -> None:
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
