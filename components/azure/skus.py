"""Does the region offer the VM size to this subscription? ARM's Resource SKUs list, asked first.

azure-native has no invoke for it, so it is one REST call (I/O kept to `http_get`), with the
token of the credentials the provider itself deploys with (authorization.getClientToken).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.components.errors import GpufleetError, SpecError
from gpufleet.components.offers import Availability, Offered, under_mocks

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

API_VERSION = "2021-07-01"
API = f"ARM Resource SKUs (Microsoft.Compute/skus, api-version {API_VERSION})"
ARM = "https://management.azure.com"
ACCESS = "https://learn.microsoft.com/troubleshoot/azure/general/region-access-request-process"

Get = Callable[[str, str], dict[str, Any]]


def skus_url(subscription: str, location: str) -> str:
    """The first page of the list, filtered to one location (the only filter it takes)."""
    query = urllib.parse.urlencode(
        {"api-version": API_VERSION, "$filter": f"location eq '{location}'"},
        quote_via=urllib.parse.quote,
    )
    return f"{ARM}/subscriptions/{subscription}/providers/Microsoft.Compute/skus?{query}"


def http_get(url: str, token: str) -> dict[str, Any]:
    """GET an ARM URL with a bearer token; the JSON body."""
    import urllib.request

    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310 (an https ARM URL)
        return json.loads(r.read().decode())


def fetch_skus(subscription: str, location: str, token: str, get: Get = http_get) -> list[dict]:
    """Every SKU entry ARM lists for `location`, following nextLink pages."""
    url: str | None = skus_url(subscription, location)
    entries: list[dict] = []
    while url:
        try:
            page = get(url, token)
        except Exception as e:  # urllib's HTTPError/URLError, or a body that is not JSON
            raise GpufleetError(
                f"could not ask Azure whether {location} offers the VM size: {e}",
                hint="check `az login` / the provider's credentials (Reader on the "
                "subscription lists SKUs), then run again; nothing was created",
            ) from e
        entries += page.get("value") or []
        url = page.get("nextLink")
    return entries


def _here(location: str, places: list[str] | None) -> bool:
    # ARM spells locations in any case (WestUS3 and westus3).
    return location.lower() in {p.lower() for p in places or []}


def sku_problem(
    entries: list[dict], size: str, location: str, spot: bool = False
) -> tuple[str, str] | None:
    """(problem, fix) when `location` does not offer `size` to this subscription, else None.

    A size missing from the list is not offered there; one listed with a Location restriction
    (reasonCode NotAvailableForSubscription or QuotaId) is there but not for this subscription.
    """
    mine = [
        e
        for e in entries
        if e.get("resourceType") == "virtualMachines"
        and str(e.get("name", "")).lower() == size.lower()
        and _here(location, e.get("locations"))
    ]
    other = "pick another region (`gpufleet catalog --cloud azure`; `az vm list-skus --size "
    if not mine:
        return f"{location} does not offer {size}", f"{other}{size} --all -o table`)"
    for r in mine[0].get("restrictions") or []:
        info = r.get("restrictionInfo") or {}
        if r.get("type") == "Location" and (
            _here(location, info.get("locations")) or _here(location, r.get("values"))
        ):
            return (
                f"{size} is in {location} but not available to this subscription "
                f"({r.get('reasonCode', 'restricted')})",
                f"{other}{size} -o table` lists what you may use), or request access: {ACCESS}",
            )
    caps = {c.get("name"): c.get("value") for c in mine[0].get("capabilities") or []}
    if spot and caps.get("LowPriorityCapable") == "False":
        return f"{size} cannot run as Spot in {location}", "set spot: false, or pick another size"
    return None


def arm_credentials() -> tuple[str, str]:
    """(subscription id, ARM token) of the credentials the fleet's azure-native provider uses
    (the explicit one where the fleet is given one: components/invokes.py)."""
    import pulumi_azure_native as az

    from gpufleet.components.invokes import lookup_opts

    config = az.authorization.get_client_config(opts=lookup_opts())
    return config.subscription_id, az.authorization.get_client_token(opts=lookup_opts()).token


def check_offered(spec: ClusterSpec, instance_type: str) -> Offered:
    """A CheckOffered (components/offers.py): ARM lists the VM size in the region for this
    subscription (field region when not). Offline there is no token: not checked."""
    location = spec.effective_region
    assert location is not None  # azure has a default region
    if under_mocks():
        why = f"no credentials offline; `up` asks {API} first"
        return Offered(Availability("not-checked", location, why))
    subscription, token = arm_credentials()
    entries = fetch_skus(subscription, location, token, http_get)
    problem = sku_problem(entries, instance_type, location, spec.spot)
    if problem:
        raise SpecError("region", *problem)
    return Offered(Availability("live", location, API))
