"""The explicit azure-native provider a fleet is given: its location decides the fleet's region."""

from __future__ import annotations

from typing import Any

import pulumi

from gpufleet.components.errors import SpecError
from gpufleet.components.invokes import explicit_provider

PACKAGE = "azure-native"


def _plain(value: Any) -> str | None:
    """A provider input as a plain string now: a provider's inputs are its outputs (its state),
    known once it is registered; None where the program left it unset or unknown."""
    if not isinstance(value, pulumi.Output):
        return value if isinstance(value, str) else None
    from pulumi.runtime.sync_await import _sync_await

    got = _sync_await(value.future())
    return got if isinstance(got, str) and got else None


def _key(location: str) -> str:
    # ARM spells a location "westus3" and "West US 3" alike.
    return location.replace(" ", "").lower()


def provider_location(opts: pulumi.ResourceOptions | None) -> tuple[str, str] | None:
    """(the provider's name, its location) of the azure-native provider the fleet's resources
    use: the explicit one, else the default one's `azure-native:location` config; None where
    it has no location."""
    provider = explicit_provider(opts, PACKAGE)
    if provider is None:
        default = pulumi.Config(PACKAGE).get("location")
        return ("default", default) if default else None
    location = _plain(getattr(provider, "location", None))
    if location is None:
        return None
    return provider._name, location  # noqa: SLF001 (pulumi.Resource keeps no public name)


def with_provider_region(fields: dict[str, Any], located: tuple[str, str] | None) -> None:
    """The fleet's region is its provider's location: filled in when unset, refused when the
    spec names another (every resource would land in the provider's location, while the
    offer, quota and image checks asked about the spec's)."""
    if located is None:
        return
    name, location = located
    region = fields.get("region")
    if region is None:
        fields["region"] = _key(location)
    elif _key(str(region)) != _key(location):
        raise SpecError(
            "region",
            f"is {region}, but the azure-native provider {name!r} the fleet uses deploys to "
            f"{location}",
            f"drop region (the fleet takes its provider's location), or give the provider "
            f"location={region!r}",
        )
