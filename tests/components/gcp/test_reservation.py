"""GCP fleets consume a named reservation when the spec gives one."""

from __future__ import annotations

from tests.components.stackplans import plan

VM = "gcp:compute/instance:Instance"


def test_vms_consume_the_named_reservation():
    """A VM uses a specific reservation only if its reservationAffinity names it with the key
    compute.googleapis.com/reservation-name (compute/docs/instances/reservations-consume)."""
    p = plan("gcp-a3", reservation="a3-res", zone="us-central1-a")
    for vm in p.of_type(VM):
        affinity = vm.inputs["reservationAffinity"]
        assert affinity["type"] == "SPECIFIC_RESERVATION"
        assert affinity["specificReservation"] == {
            "key": "compute.googleapis.com/reservation-name",
            "values": ["a3-res"],
        }
    assert all("reservationAffinity" not in vm.inputs for vm in plan("gcp-a3").of_type(VM))
