"""Does the zone offer the machine type? GCE is asked before anything is created."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.components.catalog import lookup
from gpufleet.components.errors import SpecError
from gpufleet.components.gcp.rules import series, zone_and_region, zones_for
from gpufleet.components.offers import Availability, Offered, under_mocks

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

API = "GCE machineTypes.list"
TABLE = "gpufleet's zone table (components/gcp/rules.py ZONES)"


def machine_types(machine_type: str, zone: str) -> list[str]:
    """The names GCE lists for `machine_type` in `zone`: a synchronous invoke, so it runs
    before any resource is registered. Empty when the zone does not offer it."""
    import pulumi_gcp as gcp

    from gpufleet.components.invokes import lookup_opts

    found = gcp.compute.get_machine_types(
        zone=zone, filter=f"name = {machine_type}", opts=lookup_opts()
    )
    return [m.name for m in found.machine_types or []]


def check_offered(spec: ClusterSpec, instance_type: str) -> Offered:
    """A CheckOffered (components/offers.py): live from GCE, offline from the table. Every zone
    in `zones` is checked, since each may get its turn; the first is the one returned."""
    it = lookup("gcp", instance_type)
    zone, region = zone_and_region(spec)
    zones = list(spec.zone_choices) or [zone]
    field = "zone" if spec.zone else "region"
    host = it.cloud_machine_type
    where = f"{region} ({', '.join(zones)})"
    if under_mocks():
        # No credentials offline: the table is what gpufleet knows. A zone it does not list
        # may still offer the type (the table is not complete), so it is not refused here.
        unlisted = [z for z in zones if z not in zones_for(it.name, region)]
        if unlisted:
            why = f"{TABLE} does not list {', '.join(unlisted)} for {series(it.name)}; "
            return Offered(Availability("not-checked", where, why + f"`up` asks {API}"), zone)
        return Offered(Availability("offline", where, TABLE), zone)
    for z in zones:
        if host not in machine_types(host, z):
            offered = ", ".join(zones_for(it.name, region)) or "none known"
            raise SpecError(
                field,
                f"{z} does not offer {host} (GCE lists no such machine type there)",
                f"pick another zone (gpufleet's table for {region}: {offered}; "
                f"`gcloud compute machine-types list --filter=name={host}`)",
            )
    source = API
    if it.accelerator:  # N1: the host is everywhere; its attached GPU is the scarce part
        source += f" (the {host} host; the {it.accelerator}'s zones from {TABLE})"
    return Offered(Availability("live", where, source), zone)
