"""The explicit azure-native provider a fleet is given: its location decides the fleet's region."""

from __future__ import annotations

from typing import Any

import pulumi

from gpufleet.components.errors import SpecError
from gpufleet.components.invokes import explicit_provider
from gpufleet.components.validators import Outcome

PACKAGE = "azure-native"
REGION_FACT = "the region is the provider's location"
REGION_API = "the azure-native provider's location input"


def _plain(value: Any) -> str | None:
    """A provider input as a plain string now: a provider's inputs are its outputs (its state),
    known once it is registered; None where the program left it unset or unknown."""
    if not isinstance(value, pulumi.Output):
        return value if isinstance(value, str) else None
    from pulumi.runtime.sync_await import _sync_await

    got = _sync_await(value.future())
    return got if isinstance(got, str) and got else None


def _unknown(value: Any) -> bool:
    """True for an Output not known now (a preview, where it comes from another resource)."""
    if not isinstance(value, pulumi.Output):
        return False
    from pulumi.runtime.sync_await import _sync_await

    return not _sync_await(value.is_known())


def _key(location: str) -> str:
    # ARM spells a location "westus3" and "West US 3" alike.
    return location.replace(" ", "").lower()


def provider_location(opts: pulumi.ResourceOptions | None) -> tuple[str, str | None] | None:
    """(the provider's name, its location) of the azure-native provider the fleet's resources
    use: the explicit one, else the default one's `azure-native:location` config; the location
    None where it is not known yet (a preview, the provider's location an Output of another
    resource); None where the provider has no location."""
    provider = explicit_provider(opts, PACKAGE)
    if provider is None:
        default = pulumi.Config(PACKAGE).get("location")
        return ("default", default) if default else None
    name = provider._name  # noqa: SLF001 (pulumi.Resource keeps no public name)
    given = getattr(provider, "location", None)
    if _unknown(given):
        return name, None
    location = _plain(given)
    if location is None:
        return None
    return name, location


def with_provider_region(
    fields: dict[str, Any], located: tuple[str, str | None] | None
) -> Outcome | None:
    """The fleet's region is its provider's location: filled in when unset, refused when the
    spec names another (every resource would land in the provider's location, while the
    offer, quota and image checks asked about the spec's). A location not known yet: the
    check skipped, saying why (an Outcome for the plan's checks)."""
    if located is None:
        return None
    name, location = located
    if location is None:
        region = fields.get("region")
        return Outcome(
            REGION_FACT,
            REGION_API,
            "skipped",
            f"the azure-native provider {name!r} has a location not known yet (an Output of "
            "another resource, unknown at preview): the region "
            + (f"{region} is not compared with it" if region else "is gpufleet's default")
            + "; give the provider a plain location to have it checked",
        )
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
    return None
