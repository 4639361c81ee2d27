"""A cluster's hard expiry, fixed at its first apply and kept in the stack's state."""

from __future__ import annotations

import time
from typing import Any

import pulumi
import pulumi.dynamic

# Under mocks (an offline plan) there is no first apply yet: creation shows as epoch 0, so the
# plan reads "ttl_minutes after creation" and two plans of one stack are identical.
PLANNED_CREATED_AT = 0


def expiry_of(created_at: int, ttl_minutes: int) -> int:
    return int(created_at) + int(ttl_minutes) * 60


class _ExpiryProvider(pulumi.dynamic.ResourceProvider):
    """create() reads the clock once; later applies keep that time (the expiry is state)."""

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        created = int(time.time())
        outs = {
            "ttl_minutes": int(props["ttl_minutes"]),
            "created_at": created,
            "expires_at": expiry_of(created, props["ttl_minutes"]),
        }
        return pulumi.dynamic.CreateResult(id_=f"expiry-{created}", outs=outs)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> Any:
        # Only a changed TTL changes the expiry; a new program run or a changed node count never.
        changed = int(olds.get("ttl_minutes", -1)) != int(news["ttl_minutes"])
        return pulumi.dynamic.DiffResult(changes=changed, replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> Any:
        created = int(olds["created_at"])
        outs = {
            "ttl_minutes": int(news["ttl_minutes"]),
            "created_at": created,
            "expires_at": expiry_of(created, news["ttl_minutes"]),
        }
        return pulumi.dynamic.UpdateResult(outs=outs)


class Expiry(pulumi.dynamic.Resource):
    """`expires_at` (epoch seconds) = the first apply's time + ttl_minutes; stable afterwards."""

    created_at: pulumi.Output[int]
    expires_at: pulumi.Output[int]

    def __init__(self, name: str, ttl_minutes: int, opts: pulumi.ResourceOptions | None = None):
        props = {"ttl_minutes": ttl_minutes, "created_at": None, "expires_at": None}
        super().__init__(_ExpiryProvider(), name, props, opts)


def fake_outputs(typ: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
    """What the first apply would record, for the offline plan (components/preview.py)."""
    if typ != "pulumi-python:dynamic:Resource" or "ttl_minutes" not in inputs:
        return None
    ttl = int(inputs["ttl_minutes"])
    return {
        "created_at": PLANNED_CREATED_AT,
        "expires_at": expiry_of(PLANNED_CREATED_AT, ttl),
    }
