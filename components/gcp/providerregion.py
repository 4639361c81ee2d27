"""The region of an explicit gcp.Provider: the fleet's region, and a different one refused."""

from __future__ import annotations

from typing import Any

from gpufleet.components.errors import SpecError
from gpufleet.components.invokes import lookup_opts


def provider_region() -> str | None:
    """The region the component's provider is configured with (getClientConfig, asked with
    lookup_opts()); None when it has none."""
    import pulumi_gcp as gcp

    found = gcp.organizations.get_client_config(opts=lookup_opts())
    region = found.get("region") if isinstance(found, dict) else getattr(found, "region", None)
    return str(region) if region else None


def with_provider_region(args: dict[str, Any], region: str | None, provider: str) -> dict[str, Any]:
    """`args` with the provider's region when they name none; refused when they name another
    (the resources would go to the provider's region, the zone and checks to the args')."""
    if not region:
        return args
    given = args.get("region")
    zone = args.get("zone") or (list(args.get("zones") or []) or [None])[0]
    if given and given != region:
        raise SpecError(
            "region",
            f"is {given}, but the component's provider {provider} is in {region}",
            f"leave out region (the provider's, {region}, is used), or give the component a "
            f"provider of {given}",
        )
    if not given and zone and not str(zone).startswith(f"{region}-"):
        raise SpecError(
            "zone",
            f"{zone} is not in {region}, the region of the component's provider {provider}",
            f"pick a zone of {region}, or give the component a provider of that zone's region",
        )
    return {**args, "region": region}
