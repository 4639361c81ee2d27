"""Azure's own rules on a spec (tags, admin user) and its errors explained: pure, no SDK."""

from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

# ARM tag limits (learn.microsoft.com/azure/azure-resource-manager/management/tag-resources
# #limitations): names up to 512 characters, case-insensitive, without < > % & \ ? /, not
# starting with the reserved prefixes; values up to 256 characters.
TAG_NAME_MAX, TAG_VALUE_MAX = 512, 256
TAG_NAME_FORBIDDEN = set("<>%&\\?/")
TAG_RESERVED_PREFIXES = ("microsoft", "azure", "windows")
# OSProfile.adminUsername (Compute REST API): 1-64 characters on Linux, and these are refused.
ADMIN_DISALLOWED = frozenset(
    ["administrator", "admin", "user", "user1", "test", "user2", "test1", "user3", "admin1",
     "1", "123", "a", "actuser", "adm", "admin2", "aspnet", "backup", "console", "david",
     "guest", "john", "owner", "root", "server", "sql", "support", "support_388945a0", "sys",
     "test2", "test3", "user4", "user5"]
)  # fmt: skip
# The auto-shutdown fires this long after the expiry (components/azure/backstop.py): the node
# deletes itself at its expiry and retries for 10 minutes (gpufleet-expire) first.
GRACE_S = 30 * 60
_USER_FIRST = set("abcdefghijklmnopqrstuvwxyz_")
_USER_CHARS = _USER_FIRST | set("0123456789-")
SUBNET_ID = re.compile(
    r"^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\.Network/"
    r"virtualNetworks/[^/]+/subnets/[^/]+$",
    re.IGNORECASE,
)
SUBNET_FORM = (
    "/subscriptions/<sub>/resourceGroups/<group>/providers/Microsoft.Network/"
    "virtualNetworks/<vnet>/subnets/<subnet>"
)


def check_tags(tags: dict[str, str]) -> None:
    """Refuse tags ARM would refuse, or would merge (names are case-insensitive)."""
    seen: dict[str, str] = {}
    for name, value in tags.items():
        bad = sorted(TAG_NAME_FORBIDDEN & set(name))
        if not name or len(name) > TAG_NAME_MAX or bad:
            why = f"contains {' '.join(bad)}" if bad else "must have 1-512 characters"
            raise SpecError(
                "tags", f"{name!r} is not a valid Azure tag name: it {why}", "rename the tag"
            )
        if name.lower().startswith(TAG_RESERVED_PREFIXES):
            raise SpecError(
                "tags",
                f"{name!r} starts with a prefix Azure reserves (microsoft, azure, windows)",
                "rename the tag",
            )
        if name.lower() in seen:
            raise SpecError(
                "tags",
                f"{seen[name.lower()]!r} and {name!r} are the same tag on Azure "
                "(tag names are case-insensitive)",
                "keep one of them",
            )
        seen[name.lower()] = name
        if len(value) > TAG_VALUE_MAX:
            raise SpecError(
                "tags", f"the value of {name!r} is over Azure's 256 characters", "shorten it"
            )


def check_admin(user: str) -> None:
    """Refuse an admin user name ARM refuses, or that is no Linux user name."""
    if user in ADMIN_DISALLOWED:
        raise SpecError(
            "ssh_user",
            f"{user!r} is a name Azure refuses for the admin user",
            "pick another, e.g. azureuser (the default)",
        )
    if not 1 <= len(user) <= 64 or user[0] not in _USER_FIRST or set(user) - _USER_CHARS:
        raise SpecError(
            "ssh_user",
            f"{user!r} is not a valid Azure Linux admin user name",
            "use 1-64 lowercase letters, digits, '_' or '-', starting with a letter or '_'",
        )


def spec_rules(spec: ClusterSpec) -> None:
    """What ClusterSpec itself checks on Azure: every path that makes a spec (`plan`, `up`,
    `up --dry-run`, `run`) gets these refusals."""
    check_tags(spec.tags)
    assert spec.effective_ssh_user is not None  # azure has a default user
    check_admin(spec.effective_ssh_user)
    check_spot(spec)
    check_zones(spec)
    check_network(spec)


def check_network(spec: ClusterSpec) -> None:
    """A VNet id alone: refused (it does not say which subnet the NICs join, and gpufleet
    would otherwise make a VNet of its own, silently); a subnet id that is no ARM subnet id."""
    if spec.vpc_id:
        raise SpecError(
            "vpc_id",
            f"{spec.vpc_id!r}: on Azure a VNet alone does not say which subnet the nodes join "
            "(and gpufleet would not use it)",
            "give subnet_id, the ARM id of a subnet in that VNet "
            "(`az network vnet subnet list -g <group> --vnet-name <vnet> --query [].id`), "
            "and drop vpc_id",
        )
    if spec.subnet_id:
        check_subnet_id(spec.subnet_id)


def check_subnet_id(subnet_id: str) -> None:
    """Refuse a plain subnet id that is not an ARM subnet id."""
    if not SUBNET_ID.match(subnet_id):
        raise SpecError(
            "subnet_id",
            f"{subnet_id!r} is not the ARM id of a subnet",
            f"give the subnet's id, {SUBNET_FORM} (`az network vnet subnet show --query id`)",
        )


def check_zones(spec: ClusterSpec) -> None:
    """A zone: refused. Every gpufleet Azure cluster is regional (one availability set, or on
    Spot no set at all), and availability sets take no availability zones (azure-docs
    virtual-machine-scale-sets-orchestration-modes.md, "Availability Zones | ... | Not
    supported" for AvSets): a zone would be ignored, and a zone "fallback" would re-create the
    whole regional deployment once per zone."""
    if spec.zone or spec.zones:
        field = "zones" if spec.zones else "zone"
        raise SpecError(
            field,
            f"Azure clusters are regional: their nodes share one availability set, and an "
            f"availability set supports no availability zones ({field} would be ignored)",
            f"drop {field}; pick the region instead (region: {spec.effective_region})",
        )


def check_spot(spec: ClusterSpec) -> None:
    """Spot next to InfiniBand: refused."""
    if spec.spot and spec.fabric == "infiniband":
        # ARM refuses Spot VMs in an availability set (azure-compute-docs
        # virtual-machine-scale-sets-orchestration-modes.md: "Spot instances: No, Regular
        # priority instances only"), and the availability set is what gives ND sizes InfiniBand.
        raise SpecError(
            "spot",
            f"{spec.instance_type} nodes need one availability set for InfiniBand, and Azure "
            "allows no Spot VM in an availability set",
            "set spot: false, or pick a size without InfiniBand (e.g. Standard_NC96ads_A100_v4)",
        )


def check_spec(spec: ClusterSpec, own_nsg: bool = False) -> None:
    """What only the component checks (ClusterSpec validation ran spec_rules): ssh_cidrs, which
    the CLI fills in after the spec is made; with the user's own NSG (`own_nsg`) its rules
    alone decide who reaches SSH, so ssh_cidrs would be ignored: refused."""
    if own_nsg:
        if spec.ssh_cidrs:
            raise SpecError(
                "ssh_cidrs",
                "is set, but network_security_group_id replaces gpufleet's NSG, whose rule is "
                "what ssh_cidrs would make; it would be ignored",
                "drop ssh_cidrs and let SSH in to the head in your NSG's rules, or drop "
                "network_security_group_id",
            )
        return
    if not spec.ssh_cidrs:
        raise SpecError(
            "ssh_cidrs",
            "is empty; the NSG would have no address to let SSH in from",
            "list the addresses allowed to SSH, e.g. ssh_cidrs: [203.0.113.7/32]",
        )


def refuse_extension(expiry: float, wanted: float) -> tuple[str, str] | None:
    """(problem, fix) when `wanted` is past the stack's expiry, else None.

    Azure deallocates every VM at the expiry plus the node's grace, whatever the node is told
    (`extend` moves only the node's timer): the daily auto-shutdown for a TTL under 23.5 h, a
    one-time Logic App for a longer one (components/azure/backstop.py).
    """
    if wanted <= expiry:
        return None
    firing = datetime.datetime.fromtimestamp(int(expiry) + GRACE_S, datetime.timezone.utc)
    when = datetime.datetime.fromtimestamp(int(expiry), datetime.timezone.utc)
    return (
        "Azure deallocates the VMs from outside them (their auto-shutdown, or for a TTL of "
        f"23.5 h or more a Logic App) at {firing:%Y-%m-%d %H:%M UTC}, whatever the nodes "
        "are told",
        f"extend to at most {when:%Y-%m-%d %H:%M UTC}, or apply the stack again with a longer "
        "ttl_minutes (on Azure that replaces the VMs: their custom data holds the expiry)",
    )


def explain_failure(text: str) -> tuple[str, str] | None:
    """A plain account of an Azure deployment error gpufleet knows, as (problem, fix)."""
    if "roleDefinitions/write" in text or (
        "AuthorizationFailed" in text and "roleDefinitions" in text
    ):
        return (
            "your Azure identity may not create custom roles "
            "(Microsoft.Authorization/roleDefinitions/write, which Contributor lacks); the "
            "cluster's nodes need its roles to delete or deallocate themselves at their expiry. "
            "No VM was created: they wait for the roles.",
            "run as Owner or User Access Administrator on the subscription or resource group "
            "(Role Based Access Control Administrator may assign roles but not define them)",
        )
    if "RoleDefinitionDoesNotExist" in text:
        return (
            "ARM did not yet know the cluster's custom role, created moments before (role "
            "definitions propagate eventually, pulumi-azure#840)",
            "run the same command again (the role has propagated by then)",
        )
    if "roleAssignments/write" in text or (
        "AuthorizationFailed" in text and "roleAssignments" in text
    ):
        return (
            "your Azure identity may not create role assignments "
            "(Microsoft.Authorization/roleAssignments/write, which Contributor lacks); each node "
            "needs them to delete itself at its expiry. No VM was created: they wait for them.",
            "run as Owner or User Access Administrator on the subscription or resource group "
            "(gpufleet also defines custom roles, which Role Based Access Control Administrator "
            "may not)",
        )
    if "NicReservedForAnotherVm" in text:
        return (
            "Azure keeps a network interface reserved for 180 seconds after its VM is deleted "
            "(NicReservedForAnotherVm); the VMs are gone, their NICs and what they use remain",
            "wait 3 minutes and run `gpufleet down` again",
        )
    return None
