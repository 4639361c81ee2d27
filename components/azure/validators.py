"""Azure account checks before anything is registered: quotas, the image pin, the subnet, roles."""

from __future__ import annotations

import ipaddress
import re
import urllib.error
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.components.azure.backstop import fires_first_after_expiry
from gpufleet.components.azure.byo import brought
from gpufleet.components.azure.network import HPC_IMAGE
from gpufleet.components.azure.pullaccess import acr_registry_id
from gpufleet.components.azure.security import trusted_launch
from gpufleet.components.azure.skus import ARM, http_get
from gpufleet.components.catalog import lookup
from gpufleet.components.errors import GpufleetError
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.validators import Unanswered, Validator, arm_get, refuse

if TYPE_CHECKING:
    from gpufleet.components.catalog import InstanceType
    from gpufleet.components.clusterspec import ClusterSpec

USAGES_VERSION = "2023-07-01"
IMAGES_VERSION = "2024-07-01"
GROUPS_VERSION = "2021-04-01"
VMS_VERSION = "2024-07-01"
NETWORK_VERSION = "2024-05-01"
ROLES_VERSION = "2022-04-01"
# "Azure supports up to 4000 role assignments per subscription. This limit includes role
# assignments at the subscription, resource group, and resource scopes, but not at the
# management group scope ... The 4000 role assignments limit per subscription is fixed and cannot
# be increased" (ROLES_DOC, read 2026-11-26); past it ARM answers RoleAssignmentLimitExceeded.
ROLE_ASSIGNMENT_LIMIT = 4000
ROLES_DOC = "https://learn.microsoft.com/azure/role-based-access-control/troubleshoot-limits"
# "The RDMA network in Azure reserves the address space 172.16.0.0/16 ... make sure that the
# virtual network address space does not overlap the RDMA network"
# (learn.microsoft.com/azure/virtual-machines/setup-infiniband, read 2026-11-25): the whole
# VNet's, not only the subnet's.
RDMA_RANGE = ipaddress.ip_network("172.16.0.0/16")
QUOTA_DOC = "https://learn.microsoft.com/azure/quotas/per-vm-quota-requests"
# The usages API's quota name (name.value) per size series: the family the size bills against.
FAMILIES = (
    (r"ND\d+asr_v4$", "standardNDASv4_A100Family"),
    (r"ND\d+amsr_A100_v4$", "standardNDAMSv4_A100Family"),
    (r"ND\d+isr_H100_v5$", "standardNDSH100v5Family"),
    (r"NC\d+ads_A100_v4$", "StandardNCADSA100v4Family"),
    (r"NC\d+as_T4_v3$", "Standard NCASv3_T4 Family"),
    (r"NV\d+ads_A10_v5$", "StandardNVADSA10v5Family"),
)
REGIONAL = "cores"  # "Total Regional vCPUs"
SPOT = "lowPriorityCores"  # every Spot VM of the region, whatever its family


def family(size: str) -> str | None:
    return next((f for pattern, f in FAMILIES if re.search(pattern, size)), None)


def _key(name: str) -> str:
    # ARM spells family names with stray spaces and mixed case across APIs and docs.
    return name.replace(" ", "").lower()


def _arm() -> tuple[str, Callable[[str], dict[str, Any]]]:
    """(subscription, GET) of the fleet's provider's credentials (the explicit provider where
    it has one), or of a test's FakeAccount."""
    import pulumi_azure_native as az

    subscription = az.authorization.get_client_config(opts=lookup_opts()).subscription_id
    fake = arm_get()
    if fake is not None:
        return subscription, fake
    token = az.authorization.get_client_token(opts=lookup_opts()).token
    return subscription, lambda url: http_get(url, token)


def _ask(get: Callable[[str], dict[str, Any]], url: str, what: str) -> dict[str, Any]:
    try:
        return get(url)
    except urllib.error.HTTPError:
        raise
    except Exception as e:  # URLError, a body that is not JSON
        raise GpufleetError(
            f"could not ask Azure {what}: {e}",
            hint="check `az login` / the provider's credentials (Reader on the subscription "
            "suffices), then run again; nothing was created",
        ) from e


def _pages(get: Callable[[str], dict[str, Any]], url: str, what: str) -> list[dict[str, Any]]:
    """Every `value` entry of an ARM list, following nextLink."""
    out: list[dict[str, Any]] = []
    while url:
        page = _ask(get, url, what)
        out += page.get("value") or []
        url = page.get("nextLink") or ""
    return out


def own_vcpus(
    get: Callable[[str], dict[str, Any]], subscription: str, spec: ClusterSpec, location: str
) -> dict[str, int]:
    """vCPUs this cluster's VMs already hold, per quota name (a re-apply keeps or replaces
    them, so they are no new demand): its resource group is the one tagged with its name (ARM
    autonames the group, so the name alone does not find it); none is a new cluster."""
    shared = brought().resource_group_name
    if shared is not None:
        why = brought().unknown("resource_group_name")
        if why:
            raise Unanswered(f"{why} (the cluster's own VMs are found in it)")
        # The user's group, not tagged with the cluster: its VMs that are, below.
        groups = [
            {"id": f"/subscriptions/{subscription}/resourceGroups/{shared}", "location": location}
        ]
    else:
        query = urllib.parse.quote(f"tagName eq 'gpufleet-cluster' and tagValue eq '{spec.name}'")
        groups = _pages(
            get,
            f"{ARM}/subscriptions/{subscription}/resourcegroups?$filter={query}"
            f"&api-version={GROUPS_VERSION}",
            f"for the resource group of {spec.name}",
        )
    held: dict[str, int] = {}
    for group in groups:
        if _key(group.get("location") or "") != _key(location) or not group.get("id"):
            continue
        url = (
            f"{ARM}{group['id']}/providers/Microsoft.Compute/virtualMachines"
            f"?api-version={VMS_VERSION}"
        )
        try:
            vms = _pages(get, url, f"for the VMs of {spec.name}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                continue  # the group went between the two calls
            raise
        for vm in vms:
            if shared is not None and (vm.get("tags") or {}).get("gpufleet-cluster") != spec.name:
                continue  # another's VM in the user's group
            props = vm.get("properties") or {}
            size = (props.get("hardwareProfile") or {}).get("vmSize") or ""
            try:
                vcpus = lookup("azure", size).vcpus
            except GpufleetError:
                continue  # a size gpufleet does not know: no credit
            spot = props.get("priority") == "Spot"
            for name in [SPOT] if spot else [family(size), REGIONAL]:
                if name:
                    held[_key(name)] = held.get(_key(name), 0) + vcpus
    return held


def check_quota(spec: ClusterSpec, it: InstanceType) -> str | None:
    """Free vCPUs of the size's family and of the region's total (Spot: only the regional Spot
    quota, a separate pool), plus what this cluster's own VMs hold, against nodes x vCPUs. A VM
    counts whether running or deallocated."""
    location = spec.effective_region
    assert location is not None  # azure has a default region
    subscription, get = _arm()
    held = own_vcpus(get, subscription, spec, location)
    usages = _pages(
        get,
        f"{ARM}/subscriptions/{subscription}/providers/Microsoft.Compute/locations/"
        f"{location}/usages?api-version={USAGES_VERSION}",
        f"for the vCPU quotas of {location}",
    )
    by_name = {_key((u.get("name") or {}).get("value", "")): u for u in usages}
    need = spec.nodes * it.vcpus
    # "Azure Spot Virtual Machines will have a separate quota pool" (spot-vms FAQ).
    wanted = [SPOT] if spec.spot else [family(it.name), REGIONAL]
    found = []
    for name in wanted:
        usage = by_name.get(_key(name)) if name else None
        if usage is None or name is None:
            continue  # a family we cannot name: the regional total still applies
        limit, used = int(usage.get("limit", 0)), int(usage.get("currentValue", 0))
        used -= min(used, held.get(_key(name), 0))
        label = (usage.get("name") or {}).get("localizedValue") or name
        mine = " (this cluster's own VMs not counted)" if held.get(_key(name)) else ""
        if limit - used < need:
            raise refuse(
                QUOTA,
                f"{label}: {limit - used} of {limit} vCPUs free in {location}{mine}; "
                f"{spec.nodes} x {it.name} ({it.vcpus} vCPUs each) need {need}",
                f"request {used + need} for {label} in {location} (portal: Quotas > Compute, "
                f"{QUOTA_DOC}); new subscriptions often have 0 for ND sizes",
            )
        found.append(f"{label} {limit - used} free{mine}")
    return f"need {need} vCPUs; " + ", ".join(found) if found else None


def image_url(subscription: str, location: str, image: dict[str, str]) -> str:
    parts = [urllib.parse.quote(image[k], safe="") for k in ("publisher", "offer", "sku")]
    return (
        f"{ARM}/subscriptions/{subscription}/providers/Microsoft.Compute/locations/{location}/"
        f"publishers/{parts[0]}/artifacttypes/vmimage/offers/{parts[1]}/skus/{parts[2]}/"
        f"versions/{urllib.parse.quote(image['version'], safe='')}?api-version={IMAGES_VERSION}"
    )


def check_image(spec: ClusterSpec, it: InstanceType) -> str | None:
    """The pinned marketplace image version exists in the region (PlatformImageNotFound would
    come only at the VM); where the size pins Trusted Launch, the image is Gen2 and does not
    declare another security type."""
    if spec.image:
        return None  # a custom image's id: ARM checks it at the VM
    location = spec.effective_region
    assert location is not None
    pin = ":".join(HPC_IMAGE[k] for k in ("publisher", "offer", "sku", "version"))
    subscription, get = _arm()
    try:
        found = _ask(get, image_url(subscription, location, HPC_IMAGE), f"for image {pin}")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise GpufleetError(
                f"could not ask Azure for image {pin}: HTTP {e.code}",
                hint="check the provider's credentials, then run again; nothing was created",
            ) from e
        raise refuse(
            IMAGE,
            f"{pin} is not in {location} (removed, or never published there)",
            "pick a current version: `az vm image list --publisher "
            f"{HPC_IMAGE['publisher']} --offer {HPC_IMAGE['offer']} --sku {HPC_IMAGE['sku']} "
            f"--location {location} --all -o table`, then update HPC_IMAGE or set image:",
        ) from None
    features = {
        f.get("name"): str(f.get("value", ""))
        for f in (found.get("properties") or {}).get("features") or []
    }
    security = features.get("SecurityType")
    generation = (found.get("properties") or {}).get("hyperVGeneration")
    if trusted_launch(it.name) and generation != "V2":
        # Trusted Launch boots Generation 2 images only (trusted-launch.md).
        raise refuse(
            IMAGE,
            f"{pin} has hyperVGeneration {generation or '(unstated)'}, and {it.name} nodes pin "
            "Trusted Launch, which boots Generation 2 (V2) images only",
            "pick a Gen2 image version (a SKU ending in -gen2, or one whose hyperVGeneration "
            "is V2)",
        )
    if trusted_launch(it.name) and security is not None and "TrustedLaunch" not in security:
        raise refuse(
            IMAGE,
            f"{pin} declares SecurityType {security}, and {it.name} nodes pin Trusted Launch",
            "pick an image version that supports Trusted Launch",
        )
    return f"{pin} in {location}" + (f" ({security})" if security else "")


QUOTA = Validator(
    "azure",
    "the vCPU quota covers the fleet",
    f"ARM Compute usages (GET .../locations/{{l}}/usages, api-version {USAGES_VERSION}), less "
    "the cluster's own VMs (its group by tag gpufleet-cluster, then Virtual Machines - List)",
    check_quota,
)
IMAGE = Validator(
    "azure",
    "the pinned image version exists",
    f"ARM Virtual Machine Images - Get (api-version {IMAGES_VERSION})",
    check_image,
    applies="clusters on the pinned marketplace image (no image:)",
)


def check_subnet(spec: ClusterSpec, it: InstanceType) -> str | None:
    """The user's subnet (subnet_id) exists in the provider's subscription, in the fleet's
    region, off the InfiniBand range, and delegated to no service (a delegated subnet takes no
    VM NIC). An Output id (a subnet this program makes) is not known yet: skipped."""
    own = brought()
    subnet = own.subnet_id if own.subnet_id is not None else spec.subnet_id
    if subnet is None:
        return None
    why = own.unknown("subnet_id")
    if why:
        raise Unanswered(why)
    location = spec.effective_region
    assert location is not None
    vnet_id, _, name = str(subnet).rpartition("/subnets/")
    subscription, get = _arm()
    theirs = vnet_id.split("/")[2] if vnet_id.count("/") > 2 else ""
    if theirs.lower() != subscription.lower():
        raise refuse(
            SUBNET,
            f"subnet_id is in subscription {theirs}, the provider deploys to {subscription} "
            "(a NIC joins a VNet of its own subscription only)",
            "give a subnet of the provider's subscription, or the provider that subscription",
        )
    try:
        vnet = _ask(get, f"{ARM}{vnet_id}?api-version={NETWORK_VERSION}", f"for VNet {vnet_id}")
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise GpufleetError(
                f"could not ask Azure for VNet {vnet_id}: HTTP {e.code}",
                hint="check the provider's credentials (Reader on the VNet), then run again; "
                "nothing was created",
            ) from e
        raise refuse(SUBNET, f"VNet {vnet_id} does not exist", "check subnet_id") from None
    if _key(vnet.get("location") or "") != _key(location):
        raise refuse(
            SUBNET,
            f"VNet {vnet.get('name')} is in {vnet.get('location')}, the fleet in {location} "
            "(a NIC joins a VNet of its own region)",
            f"give a subnet of a VNet in {location}, or set region: {vnet.get('location')}",
        )
    found = [
        s
        for s in (vnet.get("properties") or {}).get("subnets") or []
        if str(s.get("name", "")).lower() == name.lower()
    ]
    if not found:
        raise refuse(SUBNET, f"VNet {vnet.get('name')} has no subnet {name}", "check subnet_id")
    props = found[0].get("properties") or {}
    prefixes = props.get("addressPrefixes") or [props.get("addressPrefix")]
    inside = [p for p in prefixes if p and ipaddress.ip_network(p).overlaps(RDMA_RANGE)]
    if inside:
        raise refuse(
            SUBNET,
            f"subnet {name} ({', '.join(inside)}) overlaps 172.16.0.0/16, which InfiniBand "
            "reserves on ND VMs",
            "give a subnet outside 172.16.0.0/16",
        )
    space = ((vnet.get("properties") or {}).get("addressSpace") or {}).get("addressPrefixes")
    inside = [p for p in space or [] if p and ipaddress.ip_network(p).overlaps(RDMA_RANGE)]
    if inside:
        raise refuse(
            SUBNET,
            f"VNet {vnet.get('name')}'s address space ({', '.join(inside)}) overlaps "
            "172.16.0.0/16, which the RDMA network reserves: ND VMs' InfiniBand needs the "
            "whole VNet clear of it, not only the subnet",
            "give a subnet of a VNet whose address space lies outside 172.16.0.0/16, or remove "
            "that range from the VNet's address space",
        )
    if props.get("delegations"):
        services = [d.get("properties", {}).get("serviceName") for d in props["delegations"]]
        raise refuse(
            SUBNET,
            f"subnet {name} is delegated to {', '.join(map(str, services))}, which takes no VM",
            "give an undelegated subnet",
        )
    egress = "" if props.get("natGateway") else "; no NAT gateway: the workers need other egress"
    return f"{name} in {vnet.get('name')} ({location}), {', '.join(filter(None, prefixes))}{egress}"


SUBNET = Validator(
    "azure",
    "the subnet brought can hold the nodes",
    f"ARM Virtual Networks - Get (api-version {NETWORK_VERSION}) of the subnet's VNet",
    check_subnet,
    applies="clusters given subnet_id (skipped while it is an Output of the program)",
)


def role_assignments_made(nodes: int, shared: bool, acr_pull: bool, backstop: bool) -> int:
    """Role assignments the fleet makes (components/azure/fleet.py, backstop.py, pullaccess.py):
    per node its NIC, VM and disk, the group's deallocate in the fleet's own group, AcrPull with
    an ACR image; the Logic App backstop's on the group, or on each VM in a brought group."""
    per_node = 3 + (0 if shared else 1) + (1 if acr_pull else 0)
    return nodes * per_node + ((nodes if shared else 1) if backstop else 0)


def check_role_assignments(spec: ClusterSpec, it: InstanceType) -> str | None:
    """The subscription's role assignments (at, and below, its scope: those above it, of a
    management group, do not count) plus the fleet's stay within Azure's fixed 4000. A re-apply
    counts the cluster's own again: high, never low."""
    subscription, get = _arm()
    scope = f"/subscriptions/{subscription}"
    url = (
        f"{ARM}{scope}/providers/Microsoft.Authorization/roleAssignments"
        f"?api-version={ROLES_VERSION}"
    )
    try:
        found = _pages(get, url, "for the subscription's role assignments")
    except urllib.error.HTTPError as e:
        if e.code == 403:
            raise Unanswered(
                "the credentials may not list role assignments (Microsoft.Authorization/"
                "roleAssignments/read, which Reader holds)"
            ) from None
        raise GpufleetError(
            f"could not ask Azure for the role assignments of {scope}: HTTP {e.code}",
            hint="check the provider's credentials, then run again; nothing was created",
        ) from e
    here = scope.lower()
    used = 0
    for a in found:
        at = str((a.get("properties") or {}).get("scope") or "").lower()
        used += at == here or at.startswith(here + "/")
    registry = acr_registry_id(spec)
    pull_here = registry is not None and registry.split("/")[2].lower() == subscription.lower()
    shared = brought().resource_group_name is not None
    backstop = not fires_first_after_expiry(spec.ttl_minutes)
    need = role_assignments_made(spec.nodes, shared, pull_here, backstop)
    if used + need > ROLE_ASSIGNMENT_LIMIT:
        room = ROLE_ASSIGNMENT_LIMIT - used
        raise refuse(
            ROLE_ASSIGNMENTS,
            f"subscription {subscription} holds {used} role assignments and the cluster makes "
            f"{need} more ({spec.nodes} nodes); Azure allows {ROLE_ASSIGNMENT_LIMIT} per "
            "subscription, fixed, and would answer RoleAssignmentLimitExceeded after the "
            "network and identities exist",
            f"delete role assignments no longer used (`az role assignment list --all`), assign "
            f"roles to groups rather than to each principal ({ROLES_DOC}), use another "
            f"subscription, or fewer nodes (room for {max(room, 0)} assignments)",
        )
    return (
        f"{used} of {ROLE_ASSIGNMENT_LIMIT} role assignments in the subscription, the cluster "
        f"makes {need}"
    )


ROLE_ASSIGNMENTS = Validator(
    "azure",
    "the subscription's role assignments have room for the fleet's",
    f"ARM Role Assignments - List For Scope (the subscription, api-version {ROLES_VERSION})",
    check_role_assignments,
)
VALIDATORS = [QUOTA, IMAGE, SUBNET, ROLE_ASSIGNMENTS]
