"""A cluster's hard expiry, fixed at its first apply and kept in the stack's state."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pulumi
import pulumi.dynamic

from gpufleet.components.errors import SpecError

# Stack config `gpufleet:extendedTo` (epoch seconds): the expiry `gpufleet extend` moved a
# running cluster's nodes to. The refusal of an expired cluster waits for it; the Expiry in
# state, the tags and the user data keep the creation-time expiry.
EXTENDED_KEY = "extendedTo"

# Under mocks (an offline plan) there is no first apply yet: creation shows as epoch 0, so the
# plan reads "ttl_minutes after creation" and two plans of one stack are identical.
PLANNED_CREATED_AT = 0


def expiry_of(created_at: int, ttl_minutes: int) -> int:
    return int(created_at) + int(ttl_minutes) * 60


def updated(olds: dict[str, Any], ttl_minutes: int, now: int) -> dict[str, Any]:
    """The state after ttl_minutes changed: counted from the first apply while the cluster
    lives; once it has expired (its nodes removed themselves) from now, so that a new
    ttl_minutes is a fix for an expired stack and not another expiry in the past."""
    created = int(olds["created_at"])
    if expiry_of(created, olds["ttl_minutes"]) <= now:
        created = now
    return {
        "ttl_minutes": int(ttl_minutes),
        "created_at": created,
        "expires_at": expiry_of(created, ttl_minutes),
    }


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
        return pulumi.dynamic.UpdateResult(
            outs=updated(olds, news["ttl_minutes"], int(time.time()))
        )


class Expiry(pulumi.dynamic.Resource):
    """`expires_at` (epoch seconds) = the first apply's time + ttl_minutes; stable afterwards."""

    created_at: pulumi.Output[int]
    expires_at: pulumi.Output[int]

    def __init__(self, name: str, ttl_minutes: int, opts: pulumi.ResourceOptions | None = None):
        props = {"ttl_minutes": ttl_minutes, "created_at": None, "expires_at": None}
        super().__init__(_ExpiryProvider(), name, props, opts)


def utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def expired(cluster: str, expires_at: float) -> SpecError:
    """The refusal of a program that would create or keep nodes past the cluster's expiry."""
    return SpecError(
        "expires_at",
        f"cluster {cluster} expired at {utc(expires_at)}: its nodes have removed themselves, "
        "and nodes past their expiry are not created again",
        f"destroy it (`pulumi destroy` / `gpufleet down {cluster}`), or raise ttl_minutes "
        "(after expiry a changed ttl_minutes counts from the next `pulumi up`)",
    )


def refuse_expired(
    cluster: str, created_at: int | None, expires_at: int, now: float | None = None
) -> int:
    """`expires_at`, or the refusal when it is at or before now. An offline plan's expiry
    (created at PLANNED_CREATED_AT: no apply yet) is never refused."""
    if created_at == PLANNED_CREATED_AT:
        return expires_at
    if expires_at <= (time.time() if now is None else now):
        raise expired(cluster, expires_at)
    return expires_at


# What the stack's state holds for the Expiry under mocks; None: no apply yet (a first plan).
_state: dict[str, int] | None = None


@contextlib.contextmanager
def applied(created_at: int, ttl_minutes: int) -> Iterator[None]:
    """Under mocks: the stack's state already holds an Expiry first applied at `created_at`
    with `ttl_minutes` (a re-apply, e.g. `pulumi up --refresh` after the nodes expired)."""
    global _state
    before, _state = _state, {"created_at": int(created_at), "ttl_minutes": int(ttl_minutes)}
    try:
        yield
    finally:
        _state = before


def fake_outputs(typ: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
    """What the first apply would record (or, inside `applied`, what the state holds after this
    apply), for the offline plan (components/preview.py)."""
    if typ != "pulumi-python:dynamic:Resource" or "ttl_minutes" not in inputs:
        return None
    ttl = int(inputs["ttl_minutes"])
    if _state is not None:
        if _state["ttl_minutes"] == ttl:  # no diff: the engine keeps the state's outputs
            created = _state["created_at"]
            return {"created_at": created, "expires_at": expiry_of(created, ttl)}
        return updated(_state, ttl, int(time.time()))
    return {
        "created_at": PLANNED_CREATED_AT,
        "expires_at": expiry_of(PLANNED_CREATED_AT, ttl),
    }
