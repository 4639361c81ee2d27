"""The one place that maps a cloud name to its GpuFleet component (imported lazily)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.components.offers import Availability, CheckOffered

_FLEETS = {
    "aws": "gpufleet.components.aws",
    "gcp": "gpufleet.components.gcp",
    "azure": "gpufleet.components.azure",
}
# Each cloud's component class (its package type token is gpufleet:index:<class>).
FLEET_CLASSES = {"aws": "AwsGpuFleet", "gcp": "GcpGpuFleet", "azure": "AzureGpuFleet"}


def fleet_class(cloud: str) -> Any:
    """The fleet ComponentResource class for a cloud; imports that cloud's SDK only."""
    if cloud not in _FLEETS:
        from gpufleet.components.errors import GpufleetError

        raise GpufleetError(
            f"cloud {cloud!r} has no Pulumi component",
            hint="use aws, gcp or azure",
            exit_code=ExitCode.USAGE,
        )
    from gpufleet.components.errors import cloud_sdk

    with cloud_sdk(cloud):
        return getattr(importlib.import_module(_FLEETS[cloud]), FLEET_CLASSES[cloud])


def spec_rules(spec: ClusterSpec) -> None:
    """A cloud's own refusals of a spec (components/<cloud>/rules.py, no SDK import), if any."""
    if spec.cloud not in _FLEETS:
        return
    try:
        rules = importlib.import_module(f"{_FLEETS[spec.cloud]}.rules")
    except ModuleNotFoundError:
        return
    rules.spec_rules(spec)


def _rule(cloud: str, name: str) -> Any:
    """The function `name` of the cloud's rules module, or None where it has none."""
    if cloud not in _FLEETS:
        return None
    try:
        rules = importlib.import_module(f"{_FLEETS[cloud]}.rules")
    except ModuleNotFoundError:
        return None
    return getattr(rules, name, None)


def explain_failure(cloud: str, text: str) -> tuple[str, str] | None:
    """(problem, fix) for a deployment error the cloud's rules recognise, else None."""
    explain = _rule(cloud, "explain_failure")
    return explain(text) if explain else None


def refuse_extension(cloud: str, created_expiry: float, wanted: float) -> tuple[str, str] | None:
    """(problem, fix) when the cloud itself removes a running cluster created to expire at
    `created_expiry` before `wanted` (GCE's terminationTime), else None."""
    refuse = _rule(cloud, "refuse_extension")
    return refuse(created_expiry, wanted) if refuse else None


# The stack config key that places each cloud's provider: resources land there, whatever the
# spec says.
REGION_KEYS = {"aws": "aws:region", "gcp": "gcp:region", "azure": "azure-native:location"}


def provider_config(
    spec: ClusterSpec,
    env: dict[str, str] | None = None,
    stack_config: dict[str, str] | None = None,
) -> dict[str, str]:
    """Provider settings for a spec's stack: its region, and on GCP its project: the stack's
    own gcp:project when it has one (an environment variable never overrides it), else the
    environment the provider reads; refused with the fix when both are empty."""
    import os

    out = {}
    region = spec.effective_region
    if spec.cloud in REGION_KEYS and region:
        out[REGION_KEYS[spec.cloud]] = region
    if spec.cloud == "gcp":
        from gpufleet.components.gcp.rules import project_from_env

        own = (stack_config or {}).get("gcp:project")
        out["gcp:project"] = own or project_from_env(dict(os.environ) if env is None else env)
    return out


@dataclass(frozen=True)
class _Offers:
    """Where a cloud's CheckOffered lives (its module's `check_offered`), and whom it asks."""

    module: str
    api: str


# Each cloud's GpuFleet and ImageBake ask, before registering anything, whether the region/zone
# offers the type; one signature for all (components/offers.py CheckOffered).
_OFFERS = {
    "aws": _Offers("gpufleet.components.aws.offers", "EC2 DescribeInstanceTypeOfferings"),
    "gcp": _Offers("gpufleet.components.gcp.offers", "GCE machineTypes.list"),
    "azure": _Offers("gpufleet.components.azure.skus", "ARM Resource SKUs"),
}


def offer_check(cloud: str) -> CheckOffered:
    """The cloud's check that its region/zone offers a type; imports that cloud's SDK only."""
    from gpufleet.components.errors import cloud_sdk

    with cloud_sdk(cloud):
        check: CheckOffered = importlib.import_module(_OFFERS[cloud].module).check_offered
    return check


def unchecked_availability(spec: ClusterSpec) -> Availability | None:
    """What a dry run (which evaluates no program and asks no cloud) can say: not checked."""
    from gpufleet.components.offers import Availability

    offers = _OFFERS.get(spec.cloud)
    if offers is None:
        return None
    api = offers.api
    assert spec.effective_region is not None  # every cloud here has a default region
    where = spec.effective_region + (f" ({spec.zone})" if spec.zone else "")
    return Availability("not-checked", where, f"a dry run asks no cloud; `up` asks {api} first")


def bake_class(cloud: str) -> Any:
    """The ImageBake ComponentResource class for a cloud (components/<cloud>/bake.py)."""
    if cloud not in _FLEETS:
        from gpufleet.components.errors import GpufleetError

        raise GpufleetError(
            f"cloud {cloud!r} has no image bake",
            hint="use aws, gcp or azure",
            exit_code=ExitCode.USAGE,
        )
    from gpufleet.components.errors import cloud_sdk

    with cloud_sdk(cloud):
        return importlib.import_module(f"{_FLEETS[cloud]}.bake").ImageBake
