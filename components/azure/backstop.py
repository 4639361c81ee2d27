"""A cloud-side backstop per VM: Azure's auto-shutdown, which deallocates it without the node."""

from __future__ import annotations

import datetime
from typing import Any

import pulumi
import pulumi_azure_native as az

# The schedule fires GRACE_S after the expiry, past the node's own 10 minutes of retries, so it
# only acts on a node that hung or could not reach ARM.
from gpufleet.components.azure.rules import GRACE_S

DAY_MIN = 24 * 60


def shutdown_time(expires_at: int) -> str:
    """The schedule's daily time (HHmm, UTC): the expiry's time of day plus the grace."""
    at = datetime.datetime.fromtimestamp(int(expires_at) + GRACE_S, tz=datetime.timezone.utc)
    return at.strftime("%H%M")


def fires_first_after_expiry(ttl_minutes: int) -> bool:
    """A daily schedule set at (expiry + grace)'s time of day fires first at that moment only
    when it is less than a day away; a longer TTL would be cut short on the first day."""
    return ttl_minutes + GRACE_S // 60 < DAY_MIN


def auto_shutdown(
    vm_name: str,
    vm: Any,
    expires_at: pulumi.Output[int],
    ttl_minutes: int,
    common: dict[str, Any],
    opts: pulumi.ResourceOptions,
) -> Any:
    """Microsoft.DevTestLab/schedules `shutdown-computevm-<vm>` (a global schedule, the VM's
    Auto-shutdown blade): daily, task ComputeVmShutdownTask, which deallocates the VM: compute
    stops billing, its disks and the public IPs do not. Disabled (kept, visible) for a TTL
    that would reach the first firing early; `gpufleet down` removes it with the VM."""
    return az.devtestlab.GlobalSchedule(
        f"{vm_name}-autoshutdown",
        name=f"shutdown-computevm-{vm_name}",
        task_type="ComputeVmShutdownTask",
        target_resource_id=vm.id,
        daily_recurrence=az.devtestlab.DayDetailsArgs(time=expires_at.apply(shutdown_time)),
        time_zone_id="UTC",
        status="Enabled" if fires_first_after_expiry(ttl_minutes) else "Disabled",
        notification_settings=az.devtestlab.NotificationSettingsArgs(status="Disabled"),
        opts=opts,
        **common,
    )
