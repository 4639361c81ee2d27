"""Azure's own rules: `extend` capped at the auto-shutdown, deployment errors explained."""

from __future__ import annotations

import datetime

from gpufleet.components import registry

# Auto-shutdown (learn.microsoft.com/azure/virtual-machines/auto-shutdown-vm and REST "Global
# Schedules", read 2026-11-25): a daily recurrence at a fixed time of day that stops and
# deallocates the VM; gpufleet sets it 30 minutes past the cluster's expiry (the node's own
# delete retries for 10 of them), so the first firing is at expiry + 30 min.
FIRST_FIRING_AFTER_EXPIRY_S = 30 * 60
CREATED = 1_900_000_000  # 2030-03-17 17:46:40 UTC


def test_extend_past_the_auto_shutdown_is_refused_and_within_the_expiry_is_not():
    """`gpufleet extend` moves only the node's own timer: the VM's daily auto-shutdown still
    deallocates it at its old time of day, so an extension past it must be refused, not
    accepted and cut short (gpufleet/provision/pulumi.py calls registry.refuse_extension)."""
    assert registry.refuse_extension("azure", CREATED, CREATED - 60) is None
    assert registry.refuse_extension("azure", CREATED, CREATED) is None
    refusal = registry.refuse_extension("azure", CREATED, CREATED + 6 * 3600)
    assert refusal is not None
    problem, fix = refusal
    firing = datetime.datetime.fromtimestamp(
        CREATED + FIRST_FIRING_AFTER_EXPIRY_S, datetime.timezone.utc
    ).strftime("%H:%M UTC")
    assert "auto-shutdown" in problem and "deallocate" in problem and firing in problem
    assert "ttl_minutes" in fix
