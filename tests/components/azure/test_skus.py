"""Azure: a region that does not offer the VM size to this subscription is refused first."""

from __future__ import annotations

import urllib.parse

import pytest

from gpufleet.components.azure import skus
from gpufleet.components.errors import GpufleetError
from tests.components.stackplans import plan_and_fleet, refused_before_anything

H100 = "Standard_ND96isr_H100_v5"


def entry(name: str, location: str, restrictions: list | None = None, spot: str = "True"):
    """One Resource SKUs list entry, shaped as ARM returns it (REST reference below)."""
    return {
        "resourceType": "virtualMachines",
        "name": name,
        "tier": "Standard",
        "locations": [location],
        "locationInfo": [{"location": location, "zones": ["1", "2", "3"]}],
        "capabilities": [{"name": "LowPriorityCapable", "value": spot}],
        "restrictions": restrictions or [],
    }


NOT_FOR_YOU = {
    "type": "Location",
    "values": ["eastus"],
    "restrictionInfo": {"locations": ["eastus"]},
    "reasonCode": "NotAvailableForSubscription",
}


@pytest.fixture
def arm(monkeypatch):
    """As if running for real: ARM answers GET .../Microsoft.Compute/skus from `pages`."""
    asked: list[str] = []
    pages: list[dict] = []

    def get(url: str, token: str) -> dict:
        assert token == "arm-token"
        asked.append(url)
        return pages[len(asked) - 1]

    monkeypatch.setattr(skus, "under_mocks", lambda: False)
    monkeypatch.setattr(skus, "arm_credentials", lambda: ("sub-1", "arm-token"))
    monkeypatch.setattr(skus, "http_get", get)
    return pages, asked


def test_a_region_without_the_size_registers_nothing_and_names_the_region(arm):
    """ARM's Resource SKUs list (learn.microsoft.com/rest/api/compute/resource-skus/list,
    GET /subscriptions/{id}/providers/Microsoft.Compute/skus, $filter=location eq '...', pages
    joined by nextLink) has no entry for a size a region does not offer; creating the VM anyway
    fails with SkuNotAvailable (azure-resource-manager troubleshooting, error-sku-not-available)
    only after the resource group, VNet, identities and role assignments exist. azure-native
    has no invoke for this list, so it is asked before the component registers anything."""
    pages, asked = arm
    pages += [
        {"value": [entry("Standard_D4s_v5", "eastus")], "nextLink": "https://next/page2"},
        {"value": [entry("Standard_ND96asr_v4", "eastus")]},
    ]
    err, registered = refused_before_anything("azure-nd-h100")
    assert registered == []
    assert err.field == "region"
    assert err.problem == f"eastus does not offer {H100}"
    assert "gpufleet catalog --cloud azure" in err.fix
    first = urllib.parse.urlsplit(asked[0])
    assert first.path == "/subscriptions/sub-1/providers/Microsoft.Compute/skus"
    assert urllib.parse.parse_qs(first.query) == {
        "api-version": ["2021-07-01"],
        "$filter": ["location eq 'eastus'"],
    }
    assert asked[1] == "https://next/page2"


def test_a_size_not_available_to_the_subscription_is_refused_with_the_reason(arm):
    """A size ARM lists with a Location restriction (reasonCode NotAvailableForSubscription or
    QuotaId, same REST reference) is in the region but this subscription may not create it;
    Microsoft's fix is a region/SKU access request."""
    pages, _ = arm
    pages.append({"value": [entry(H100, "EastUS", [NOT_FOR_YOU])]})
    err, registered = refused_before_anything("azure-nd-h100")
    assert registered == []
    assert err.field == "region"
    assert "not available to this subscription (NotAvailableForSubscription)" in err.problem
    assert skus.ACCESS in err.fix


def test_an_offered_size_plans_and_says_it_was_checked_live(arm):
    pages, _ = arm
    pages.append({"value": [entry(H100, "eastus")]})
    p, fleet = plan_and_fleet("azure-nd-h100")
    assert p.of_type("azure-native:compute:VirtualMachine")
    assert fleet.availability.status == "live"
    assert "Resource SKUs" in fleet.availability.source


def test_offline_the_plan_says_availability_was_not_checked():
    """Under mocks there is no Azure token: the plan says so instead of pretending."""
    _, fleet = plan_and_fleet("azure-nd-h100")
    assert fleet.availability.status == "not-checked"
    assert "no credentials offline" in fleet.availability.source


def test_spot_on_a_size_that_cannot_run_spot_is_refused():
    """The entry's LowPriorityCapable capability says whether Spot can run the size."""
    problem = skus.sku_problem([entry(H100, "eastus", spot="False")], H100, "eastus", spot=True)
    assert problem and "cannot run as Spot" in problem[0]
    assert skus.sku_problem([entry(H100, "eastus", spot="False")], H100, "eastus") is None


def test_a_failed_call_to_arm_is_an_error_that_says_nothing_was_created():
    def refuse(url: str, token: str) -> dict:
        raise OSError("HTTP Error 403: Forbidden")

    with pytest.raises(GpufleetError) as e:
        skus.fetch_skus("sub-1", "eastus", "tok", refuse)
    assert "403" in e.value.message and "nothing was created" in (e.value.hint or "")
