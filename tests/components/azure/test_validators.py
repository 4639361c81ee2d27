"""Azure validators against a fake account: the vCPU quota and the image pin are asked before
anything is registered (issue 19 items 18 and 19)."""

from __future__ import annotations

import urllib.error
import urllib.parse

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.preview import evaluate
from gpufleet.components.validators import AccountError, FakeAccount

# Read 2026-11-25.
# Usage - List (learn.microsoft.com/rest/api/compute/usage/list): GET https://management.azure.
# com/subscriptions/{subscriptionId}/providers/Microsoft.Compute/locations/{location}/usages,
# api-version 2023-07-01; each value has currentValue, limit, unit "Count" and name {value,
# localizedValue}; the regional total is "cores" ("Total Regional vCPUs", az vm list-usage and
# azure-docs articles/virtual-machines/quotas.md: a VM must fit both its family's quota and the
# regional total; deallocated VMs count). Spot VMs count against "lowPriorityCores".
USAGES_PATH = "/subscriptions/{s}/providers/Microsoft.Compute/locations/{l}/usages"
USAGES_VERSION = "2023-07-01"
# Family quota names per size series, spelled as the docs table spells them (Azure VM family
# names table, OpenShift "Installing on Azure", GPU accelerated: "ND-H100-v5-series |
# standardNDSH100v5Family", "NDasrA100_v4-series | Standard NDASv4_A100 Family"); the
# usages API spells the latter standardNDASv4_A100Family, so the fake answers with the docs'
# spelling and the check must match either.
FAMILY = {
    "Standard_ND96isr_H100_v5": ("standardNDSH100v5Family", "Standard NDSH100v5 Family vCPUs"),
    "Standard_ND96asr_v4": ("Standard NDASv4_A100 Family", "Standard NDASv4_A100 Family vCPUs"),
}
# vCPUs per size (learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ndasra100v4-
# series and nca100v4-series, read 2026-11-25).
VCPUS = {"Standard_ND96asr_v4": 96, "Standard_NC96ads_A100_v4": 96}
# Resource Groups - List (learn.microsoft.com/rest/api/resources/resourcegroups/list, read
# 2026-11-25): GET /subscriptions/{s}/resourcegroups?$filter=tagName eq 'k' and tagValue eq 'v'
# &api-version=2021-04-01; each value has id, name, location, tags. Virtual Machines - List
# (learn.microsoft.com/rest/api/compute/virtual-machines/list): GET {group id}/providers/
# Microsoft.Compute/virtualMachines; properties.hardwareProfile.vmSize, properties.priority.
GROUPS_PATH = "/subscriptions/{s}/resourcegroups"
OWN_GROUP = "/subscriptions/{s}/resourceGroups/azure-nd-a100-rg1a2b3c4d"  # autonamed
SUB = "00000000-0000-0000-0000-000000000000"  # the azure mocks' getClientConfig answer
# Virtual Machine Images - Get (learn.microsoft.com/rest/api/compute/virtual-machine-images/get)
IMAGE_PATH = (
    "/subscriptions/{s}/providers/Microsoft.Compute/locations/{l}/publishers/{p}/"
    "artifacttypes/vmimage/offers/{o}/skus/{k}/versions/{v}"
)
VM_TYPE = "azure-native:compute:VirtualMachine"
# Read 2026-11-26. Troubleshoot Azure RBAC limits (https://learn.microsoft.com/en-us/azure/
# role-based-access-control/troubleshoot-limits): "Azure supports up to 4000 role assignments per
# subscription. This limit includes role assignments at the subscription, resource group, and
# resource scopes, but not at the management group scope." "The 4000 role assignments limit per
# subscription is fixed and cannot be increased." The error: "No more role assignments can be
# created (code: RoleAssignmentLimitExceeded)".
SOURCE_ROLE_LIMIT = 4000
SOURCE_ROLE_ERROR = "RoleAssignmentLimitExceeded"
# Role Assignments - List For Scope (https://learn.microsoft.com/en-us/rest/api/authorization/
# role-assignments/list-for-scope, read 2026-11-26): GET https://management.azure.com/{scope}/
# providers/Microsoft.Authorization/roleAssignments?api-version=2022-04-01, without $filter the
# assignments at, above and below the scope; each value has properties.scope; paged by nextLink.
ROLES_PATH = "/subscriptions/{s}/providers/Microsoft.Authorization/roleAssignments"
ROLES_VERSION = "2022-04-01"
MANAGEMENT_GROUP = "/providers/Microsoft.Management/managementGroups/corp"


def role_assignments(url: str, count: int, above: int = 0, page: int = 1000) -> dict | None:
    """ARM's answer to the subscription's role assignments: `count` at or below it, `above` at a
    management group (listed, not counted), `page` a page; None for another URL."""
    parts = urllib.parse.urlsplit(url)
    if parts.path != ROLES_PATH.format(s=SUB):
        return None
    query = urllib.parse.parse_qs(parts.query)
    assert query["api-version"] == [ROLES_VERSION] and "$filter" not in query
    scopes = [MANAGEMENT_GROUP] * above + [
        f"/subscriptions/{SUB}" + ("" if i % 3 == 0 else f"/resourceGroups/g{i % 7}")
        for i in range(count)
    ]
    start = int(query.get("$skipToken", ["0"])[0])
    value = [{"properties": {"scope": sc}} for sc in scopes[start : start + page]]
    more = start + page < len(scopes)
    link = f"https://management.azure.com{parts.path}?api-version={ROLES_VERSION}"
    return {"value": value, **({"nextLink": f"{link}&$skipToken={start + page}"} if more else {})}


def usage(name: str, label: str, limit: int, used: int = 0) -> dict:
    return {
        "currentValue": used,
        "limit": limit,
        "unit": "Count",
        "name": {"value": name, "localizedValue": label},
    }


def account(
    family_limit: int,
    regional: int = 1000,
    image: str = "found",
    spot: int = 0,
    own: tuple[tuple[str, str], ...] = (),
    generation: str = "V2",
    roles: int = 0,
):
    """A fake ARM; `own`: (size, priority) of VMs already in the cluster's tagged group, which
    the usages count too."""
    asked: list[str] = []
    held = sum(VCPUS[size] for size, _ in own)

    def arm(url: str) -> dict:
        asked.append(url)
        listed = role_assignments(url, roles, above=5)
        if listed is not None:
            return listed
        parts = urllib.parse.urlsplit(url)
        path = parts.path
        if path == GROUPS_PATH.format(s=SUB):
            wanted = "tagName eq 'gpufleet-cluster' and tagValue eq 'azure-nd-a100'"
            if not own or urllib.parse.parse_qs(parts.query)["$filter"] != [wanted]:
                return {"value": []}
            group = OWN_GROUP.format(s=SUB)
            return {"value": [{"id": group, "location": "eastus", "tags": {}}]}
        if path == OWN_GROUP.format(s=SUB) + "/providers/Microsoft.Compute/virtualMachines":
            return {
                "value": [
                    {"properties": {"hardwareProfile": {"vmSize": size}, "priority": prio}}
                    for size, prio in own
                ]
            }
        if path.endswith("/usages"):
            spot_used = sum(VCPUS[z] for z, p in own if p == "Spot")
            return {
                "value": [
                    usage("cores", "Total Regional vCPUs", regional, used=8 + held - spot_used),
                    usage("lowPriorityCores", "Total Regional Low-priority vCPUs", spot, spot_used),
                    *[
                        usage(n, label, family_limit, used=held - spot_used)
                        for n, label in FAMILY.values()
                    ],
                    usage("standardDSv3Family", "Standard DSv3 Family vCPUs", 100),
                ]
            }
        if "/artifacttypes/vmimage/" in path:
            if image == "missing":
                raise urllib.error.HTTPError(url, 404, "Not Found", None, None)  # type: ignore[arg-type]
            props: dict = {"hyperVGeneration": generation}
            if image != "found":  # an image version that declares its security type
                props["features"] = [{"name": "SecurityType", "value": image}]
            return {"name": path.rsplit("/", 1)[1], "properties": props}
        raise AssertionError(url)

    return FakeAccount(arm=arm), asked


def run(stack: str, acct: FakeAccount, **over):
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack)
    if over:
        from gpufleet.components.clusterspec import ClusterSpec

        spec = ClusterSpec.from_input({**spec.model_dump(), **over})
    built = []

    def program():
        built.append(stackconfig.build(spec))
        return stackconfig.exports(built[0])

    return built, evaluate(program, config=stackconfig.pulumi_config(config), account=acct)


def refusal(stack: str, acct: FakeAccount, **over) -> AccountError:
    with pytest.raises(Exception) as caught:
        run(stack, acct, **over)
    err: BaseException | None = caught.value
    while err is not None and not isinstance(err, AccountError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, AccountError), repr(caught.value)
    return err


def test_a_family_quota_of_zero_is_refused_before_anything_is_created():
    """ND quotas are usually 0 on a new subscription; ARM would refuse the VM only after the
    resource group, NAT, IPs, identities and roles exist."""
    acct, asked = account(family_limit=0)
    err = refusal("azure-nd-h100", acct)
    _, label = FAMILY["Standard_ND96isr_H100_v5"]
    assert err.fact == "the vCPU quota covers the fleet"
    assert f"{label}: 0 of 0 vCPUs free in eastus" in err.problem and "need 192" in err.problem
    assert "Quotas" in err.fix and "192" in err.fix
    (first,) = [u for u in asked if u.split("?")[0].endswith("/usages")]
    parts = urllib.parse.urlsplit(first)
    assert parts.path == USAGES_PATH.format(s=SUB, l="eastus")
    assert urllib.parse.parse_qs(parts.query) == {"api-version": [USAGES_VERSION]}


def test_the_regional_total_is_checked_too():
    acct, _ = account(family_limit=192, regional=100)  # 8 in use: 92 free
    err = refusal("azure-nd-a100", acct)
    assert "Total Regional vCPUs: 92 of 100 vCPUs free" in err.problem


def test_spot_nodes_are_checked_against_the_regional_spot_quota():
    acct, _ = account(family_limit=0, spot=0)
    err = refusal("azure-nd-a100", acct, instance_type="Standard_NC96ads_A100_v4", spot=True)
    assert "Low-priority" in err.problem


def test_spot_nodes_are_not_checked_against_the_regular_quotas():
    """ "Azure Spot Virtual Machines will have a separate quota pool" (learn.microsoft.com/azure/
    virtual-machines/spot-vms, FAQ, read 2026-11-25): a full regular regional quota does not
    stop Spot VMs."""
    acct, _ = account(family_limit=0, regional=8, spot=200)
    built, _ = run("azure-nd-a100", acct, instance_type="Standard_NC96ads_A100_v4", spot=True)
    quota = {c.fact: c for c in built[0].checks}["the vCPU quota covers the fleet"]
    assert quota.status == "passed", quota.detail
    assert "Total Regional vCPUs" not in (quota.detail or "")


def test_a_reapply_does_not_count_the_clusters_own_vms_against_it():
    """The usages count every VM of the region, this cluster's running ones included; a
    re-apply keeps (or replaces, delete-first) them, so they are no new demand."""
    own = (("Standard_ND96asr_v4", "Regular"),) * 2
    acct, asked = account(family_limit=192, regional=200, own=own)
    built, _ = run("azure-nd-a100", acct)
    quota = {c.fact: c for c in built[0].checks}["the vCPU quota covers the fleet"]
    assert quota.status == "passed", quota.detail
    assert any(urllib.parse.urlsplit(u).path == GROUPS_PATH.format(s=SUB) for u in asked)


def test_without_its_own_vms_the_same_usage_is_refused():
    """The same family usage with no group of this cluster (a new one): refused."""
    acct, _ = account(family_limit=192, regional=1000)
    full = acct.arm

    def arm(url: str) -> dict:
        answer = full(url)
        if urllib.parse.urlsplit(url).path.endswith("/usages"):
            for u in answer["value"]:
                if u["name"]["value"] == FAMILY["Standard_ND96asr_v4"][0]:
                    u["currentValue"] = 192
        return answer

    err = refusal("azure-nd-a100", FakeAccount(arm=arm))
    assert "Standard NDASv4_A100 Family vCPUs: 0 of 192 vCPUs free" in err.problem


def test_room_in_the_family_and_the_region_passes_and_says_what_it_found():
    acct, asked = account(family_limit=192)
    built, plan = run("azure-nd-h100", acct)
    checks = {c.fact: c for c in built[0].checks}
    quota = checks["the vCPU quota covers the fleet"]
    assert quota.status == "passed"
    assert quota.detail.startswith("need 192 vCPUs; Standard NDSH100v5 Family vCPUs 192 free")
    assert plan.of_type(VM_TYPE)


def test_a_missing_image_version_is_refused_naming_the_pin():
    """PlatformImageNotFound would come at VM creation, after everything else exists."""
    acct, asked = account(family_limit=192, image="missing")
    err = refusal("azure-nd-a100", acct)
    assert err.fact == "the pinned image version exists"
    assert "microsoft-dsvm:ubuntu-hpc:2204:" in err.problem and "eastus" in err.problem
    assert "az vm image list" in err.fix
    (url,) = [u for u in asked if "/artifacttypes/" in u]
    parts = urllib.parse.urlsplit(url)
    head = IMAGE_PATH.format(s=SUB, l="eastus", p="microsoft-dsvm", o="ubuntu-hpc", k="2204", v="")
    assert parts.path.startswith(head) and parts.path != head


def test_an_image_version_that_exists_passes():
    acct, _ = account(family_limit=192)
    built, _ = run("azure-nd-a100", acct)
    image = {c.fact: c for c in built[0].checks}["the pinned image version exists"]
    assert image.status == "passed" and image.detail.endswith("in eastus")


def test_offline_every_check_is_skipped_with_the_reason():
    built, _ = run("azure-nd-a100", None)  # type: ignore[arg-type]
    assert [c.status for c in built[0].checks] == ["skipped"] * 4


def test_an_image_that_declares_no_trusted_launch_is_refused_where_the_size_pins_it():
    """An image version lists its SecurityType among its features (Virtual Machine Images -
    Get: properties.features, e.g. TrustedLaunchSupported); ND H100 v5 nodes pin Trusted
    Launch, which an image declaring only confidential VMs cannot boot."""
    acct, _ = account(family_limit=192, image="ConfidentialVmSupported")
    err = refusal("azure-nd-h100", acct)
    assert "SecurityType ConfidentialVmSupported" in err.problem
    acct, _ = account(family_limit=192, image="TrustedLaunchSupported")
    built, _ = run("azure-nd-h100", acct)
    image = {c.fact: c for c in built[0].checks}["the pinned image version exists"]
    assert image.detail.endswith("(TrustedLaunchSupported)")


# Trusted Launch (learn.microsoft.com/azure/virtual-machines/trusted-launch, read 2026-11-25):
# "Trusted launch requires ... Generation 2 VM" images; an image version states its
# generation as properties.hyperVGeneration ("V1" or "V2", Virtual Machine Images - Get).
TRUSTED_LAUNCH_GENERATION = "V2"


def test_a_generation_1_image_is_refused_where_the_size_pins_trusted_launch():
    """An image declaring no SecurityType says nothing about Trusted Launch; a Gen1 image cannot
    boot one at all. ND H100 v5 pins it; ND A100 v4 does not, and takes the same image."""
    acct, _ = account(family_limit=192, generation="V1")
    err = refusal("azure-nd-h100", acct)
    assert "V1" in err.problem and "Trusted Launch" in err.problem
    acct, _ = account(family_limit=192, generation="V1")
    built, _ = run("azure-nd-a100", acct)
    assert {c.status for c in built[0].checks} == {"passed"}
    acct, _ = account(family_limit=192, generation=TRUSTED_LAUNCH_GENERATION)
    built, _ = run("azure-nd-h100", acct)
    assert {c.status for c in built[0].checks} == {"passed"}


ROLE_TYPE = "azure-native:authorization:RoleAssignment"
ROLES_FACT = "the subscription's role assignments have room for the fleet's"


def test_role_assignments_past_the_subscriptions_fixed_limit_are_refused():
    """ARM would answer RoleAssignmentLimitExceeded at a node's assignment, after the group,
    network and identities exist. The fleet's own count is what its plan registers; the
    management group's assignments are listed too and do not count."""
    acct, _ = account(family_limit=192)
    built, plan = run("azure-nd-a100", acct)
    made = len(plan.of_type(ROLE_TYPE))
    passed = {c.fact: c for c in built[0].checks}[ROLES_FACT]
    assert passed.status == "passed" and passed.detail.endswith(f"makes {made}")

    used = SOURCE_ROLE_LIMIT - made + 1  # over several pages of the list
    acct, asked = account(family_limit=192, roles=used)
    err = refusal("azure-nd-a100", acct)
    assert err.fact == ROLES_FACT and SOURCE_ROLE_ERROR in err.problem
    assert f"holds {used} role assignments" in err.problem and f"makes {made} more" in err.problem
    assert f"{SOURCE_ROLE_LIMIT} per subscription, fixed" in err.problem
    assert "az role assignment list" in err.fix and "another subscription" in err.fix
    assert "troubleshoot-limits" in err.fix and f"room for {made - 1}" in err.fix
    pages = [u for u in asked if urllib.parse.urlsplit(u).path == ROLES_PATH.format(s=SUB)]
    assert len(pages) == (used + 5 + 999) // 1000


def test_role_assignments_up_to_the_limit_pass():
    acct, _ = account(family_limit=192)
    _, plan = run("azure-nd-a100", acct)
    made = len(plan.of_type(ROLE_TYPE))
    acct, _ = account(family_limit=192, roles=SOURCE_ROLE_LIMIT - made)
    built, _ = run("azure-nd-a100", acct)
    roles = {c.fact: c for c in built[0].checks}[ROLES_FACT]
    assert roles.status == "passed"
    assert roles.detail.startswith(f"{SOURCE_ROLE_LIMIT - made} of {SOURCE_ROLE_LIMIT} ")


def test_role_assignments_that_may_not_be_listed_are_skipped_with_the_reason():
    acct, _ = account(family_limit=192)
    full = acct.arm

    def arm(url: str) -> dict:
        if "/Microsoft.Authorization/roleAssignments" in url:
            raise urllib.error.HTTPError(url, 403, "Forbidden", None, None)  # type: ignore[arg-type]
        return full(url)  # type: ignore[misc]

    built, _ = run("azure-nd-a100", FakeAccount(arm=arm))
    roles = {c.fact: c for c in built[0].checks}[ROLES_FACT]
    assert roles.status == "skipped" and "roleAssignments/read" in roles.detail
