"""The user's own Azure resources a fleet uses (group, subnet, NSG, ASGs), not in ClusterSpec."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from gpufleet.components.errors import SpecError
from gpufleet.components.scoped import Scoped

# The args an Azure fleet takes beyond ClusterSpec's fields: ids of things the program owns,
# each a pulumi.Input (an Output of the program's own resource never reaches ClusterSpec).
OWN_INPUTS = (
    "resource_group_name",
    "network_security_group_id",
    "application_security_group_ids",
)


@dataclass(frozen=True)
class Brought:
    """The user's own resources the fleet uses instead of making its own (None: made)."""

    resource_group_name: pulumi.Input[str] | None = None
    subnet_id: pulumi.Input[str] | None = None
    network_security_group_id: pulumi.Input[str] | None = None
    application_security_group_ids: list[pulumi.Input[str]] = field(default_factory=list)

    def unknown(self, what: str) -> str | None:
        """Why a validator cannot look at `what` now: it is an Output of this program."""
        value = getattr(self, what)
        if isinstance(value, pulumi.Output):
            return (
                f"{what} is a pulumi.Output (a resource of this program, not known before it "
                "exists); ARM checks it when the fleet's resources are created"
            )
        return None


def split_args(args: Any) -> tuple[dict[str, Any], Brought]:
    """(the args ClusterSpec takes, what the fleet brings): a plain subnet_id stays in the spec
    (the CLI path sets it there too); an Output one, and the other own ids, stay out."""
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.components.fleetargs import args_from_spec

    if isinstance(args, ClusterSpec):
        args = args_from_spec(args)
    plain = {k: v for k, v in dict(args or {}).items() if v is not None}
    own = {k: plain.pop(k) for k in OWN_INPUTS if k in plain}
    subnet = plain.get("subnet_id")
    if isinstance(subnet, pulumi.Output):
        plain.pop("subnet_id")
    asgs = own.get("application_security_group_ids") or []
    if isinstance(asgs, pulumi.Output):
        raise SpecError(
            "application_security_group_ids",
            "is one pulumi.Output; its length decides each NIC's groups",
            "give a list whose items may be Outputs: [asg.id, ...]",
        )
    if subnet is None:
        refuse_without_subnet(own)
    brought = Brought(
        resource_group_name=own.get("resource_group_name"),
        subnet_id=subnet,
        network_security_group_id=own.get("network_security_group_id"),
        application_security_group_ids=list(asgs),
    )
    return plain, brought


def refuse_without_subnet(own: dict[str, Any]) -> None:
    """An NSG or ASGs of the user's own with no subnet_id: gpufleet would put them on the VNet
    it makes, where the NICs could not join an ASG already used in another VNet (all NICs of an
    ASG share one VNet) and the user's rules naming it would never meet the nodes."""
    for field_name in ("network_security_group_id", "application_security_group_ids"):
        if own.get(field_name):
            raise SpecError(
                field_name,
                "is given without subnet_id: the nodes would join the VNet gpufleet makes, not "
                "the network your security groups serve (an application security group's NICs "
                "all share one VNet)",
                f"give subnet_id too (a subnet of the VNet your groups belong to), or drop "
                f"{field_name} and let gpufleet make its own NSG",
            )


# Within `bringing(b)`, `brought()` is what the fleet being declared brings (for its
# validators); outside, nothing.
_BROUGHT: Scoped[Brought] = Scoped("azure_brought", Brought)
bringing = _BROUGHT.within
brought = _BROUGHT.get
