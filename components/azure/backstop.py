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


def expiry_time(expires_at: int) -> str:
    """The absolute backstop's first firing (ISO 8601, UTC): the expiry plus the grace."""
    at = datetime.datetime.fromtimestamp(int(expires_at) + GRACE_S, tz=datetime.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def deallocate_definition(start: str, vm_ids: list[str]) -> dict[str, Any]:
    """A Logic Apps workflow definition: a Recurrence trigger that first fires at `start` (then
    daily, for a VM started again), one HTTP action per VM POSTing its deallocate with the
    workflow's own managed identity."""
    return {
        "$schema": "https://schema.management.azure.com/providers/Microsoft.Logic/schemas/"
        "2016-06-01/workflowdefinition.json#",
        "contentVersion": "1.0.0.0",
        "triggers": {
            "expiry": {
                "type": "Recurrence",
                "recurrence": {"frequency": "Day", "interval": 1, "startTime": start},
            }
        },
        "actions": {
            f"deallocate-{i}": {
                "type": "Http",
                "inputs": {
                    "method": "POST",
                    "uri": f"https://management.azure.com{vm_id}/deallocate?api-version=2024-07-01",
                    "authentication": {
                        "type": "ManagedServiceIdentity",
                        "audience": "https://management.azure.com/",
                    },
                },
                "runAfter": {},
            }
            for i, vm_id in enumerate(vm_ids)
        },
    }


def absolute_backstop(
    name: str,
    vms: list[Any],
    expires_at: pulumi.Output[int],
    grant: Any,
    scopes: list[tuple[str, Any, pulumi.ResourceOptions]],
    common: dict[str, Any],
    opts: pulumi.ResourceOptions,
) -> Any:
    """For a TTL the daily auto-shutdown cannot cover (its schedule is Disabled): a Consumption
    Logic App (Microsoft.Logic/workflows) whose Recurrence trigger first fires at the expiry
    plus the grace and deallocates every VM, with its own identity holding `grant` (the
    deallocate-only role) on each scope of `scopes` ((resource name, scope, options): the
    cluster's own group, or each of its VMs in a brought group). `gpufleet down` removes it."""
    definition = pulumi.Output.all(expires_at, *[vm.id for vm in vms]).apply(
        lambda v: deallocate_definition(expiry_time(v[0]), list(v[1:]))
    )
    flow = az.logic.Workflow(
        f"{name}-expiry",
        state="Enabled",
        definition=definition,
        identity=az.logic.ManagedServiceIdentityArgs(type="SystemAssigned"),
        opts=opts,
        **common,
    )
    for label, scope, grant_opts in scopes:
        az.authorization.RoleAssignment(
            label,
            principal_id=flow.identity.apply(lambda i: i.principal_id if i else ""),
            principal_type="ServicePrincipal",
            role_definition_id=grant.id,
            scope=scope,
            opts=grant_opts,
        )
    return flow
