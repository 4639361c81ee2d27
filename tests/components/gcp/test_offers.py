"""GCP: a zone that does not offer the machine type is refused before anything is registered."""

from __future__ import annotations

import pytest

from gpufleet.components.gcp import offers
from tests.components.stackplans import plan_and_fleet, refused_before_anything


@pytest.fixture
def live_gce(monkeypatch):
    """As if running for real: GCE answers machineTypes.list from `offered` (zone -> types)."""
    asked: list[tuple[str, str]] = []
    offered: dict[str, list[str]] = {}

    def machine_types(machine_type: str, zone: str) -> list[str]:
        asked.append((machine_type, zone))
        return [t for t in offered.get(zone, []) if t == machine_type]

    monkeypatch.setattr(offers, "under_mocks", lambda: False)
    monkeypatch.setattr(offers, "machine_types", machine_types)
    return offered, asked


def test_a_zone_without_the_machine_type_registers_nothing_and_names_the_zone(live_gce):
    """GCE's machineTypes.list lists the machine types a zone offers
    (cloud.google.com/compute/docs/reference/rest/v1/machineTypes/list); pulumi_gcp wraps it
    as the synchronous gcp.compute.get_machine_types(zone, filter) (pulumi_gcp
    compute/get_machine_types.py), which runs before the component registers anything.
    Here GCE lists a3-highgpu-8g in us-central1-a and -c only (the zones gpufleet's table
    has from GCE's GPU regions and zones page), and the stack asks for -b."""
    offered, asked = live_gce
    offered.update({"us-central1-a": ["a3-highgpu-8g"], "us-central1-c": ["a3-highgpu-8g"]})
    err, registered = refused_before_anything("gcp-a3", zone="us-central1-b")
    assert registered == []
    assert err.field == "zone"
    assert "us-central1-b does not offer a3-highgpu-8g" in err.problem
    assert "us-central1-a, us-central1-c" in err.fix
    assert asked == [("a3-highgpu-8g", "us-central1-b")]


def test_every_zone_to_try_is_asked(live_gce):
    """Each of `zones` may get its turn after a capacity error, so each is asked up front."""
    offered, asked = live_gce
    offered.update({"us-central1-a": ["a2-highgpu-8g"]})
    err, registered = refused_before_anything(
        "gcp-a2", zone="us-central1-a", zones=["us-central1-a", "us-central1-f"]
    )
    assert registered == [] and err.field == "zone" and "us-central1-f" in err.problem
    assert [z for _, z in asked] == ["us-central1-a", "us-central1-f"]


def test_offline_the_table_answers_and_says_so():
    """No credentials under mocks: the zone table answers (a listed zone is "offline"), and a
    zone the table does not list is not refused (the table is not complete) but marked as
    not checked, for `up` to ask GCE."""
    _, listed = plan_and_fleet("gcp-a3")
    assert listed.availability.status == "offline"
    assert listed.availability.source == offers.TABLE
    p, unlisted = plan_and_fleet("gcp-a3", zone="us-central1-b")
    assert p.of_type("gcp:compute/instance:Instance"), "not refused offline"
    assert unlisted.availability.status == "not-checked"
    assert "us-central1-b" in unlisted.availability.source
