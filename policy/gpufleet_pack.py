"""The pack's policies: gpufleet_policy's pure checks wired into ResourceValidationPolicy."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import gpufleet_policy as checks
from pulumi_policy import (
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError


def _reported(
    check: Callable[[ResourceValidationArgs], list[checks.Violation]],
) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        try:
            found = check(args)
        except checks.UnknownAtPreview as e:
            # the engine's "can't run policy ... during preview": neither a pass nor a failure
            raise UnknownValueError(UNKNOWN_STRING_VALUE, e.path.split(".")) from e
        for v in found:
            report(v.message, None)

    return validate


def _max_hours(args: ResourceValidationArgs) -> float:
    return float(args.get_config().get("maxHours", checks.DEFAULT_MAX_HOURS))


def policies(now: Callable[[], float] = time.time) -> list[Any]:
    expiry = ResourceValidationPolicy(
        name=checks.EXPIRY_POLICY,
        description=f"Every GPU instance carries `{checks.EXPIRY_KEY}` (AWS/Azure tag, GCP "
        "label) at most maxHours ahead.",
        validate=_reported(
            lambda a: checks.check_expiry(
                a.resource_type, a.props, now=now(), max_hours=_max_hours(a)
            )
        ),
        config_schema=PolicyConfigSchema(
            properties={
                "maxHours": {
                    "type": "number",
                    "default": checks.DEFAULT_MAX_HOURS,
                    "description": "the furthest a GPU instance's expiry may be, in hours",
                }
            }
        ),
    )
    ssh = ResourceValidationPolicy(
        name=checks.SSH_POLICY,
        description="No security group, firewall or NSG rule allows SSH (22) from 0.0.0.0/0, "
        "::/0, * or Internet.",
        validate=_reported(lambda a: checks.check_ssh(a.resource_type, a.props)),
    )
    return [expiry, ssh]
