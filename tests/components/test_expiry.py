"""After expiry the program refuses to create or keep nodes; a new ttl_minutes counts from now."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpufleet.components import expiry, stackconfig
from gpufleet.components.errors import SpecError
from gpufleet.components.preview import Plan, evaluate

HOUR = 3600
# each cloud's ready stack, and the resource type its nodes are
STACKS = {
    "aws-p4d": "aws:ec2/instance:Instance",
    "gcp-a2": "gcp:compute/instance:Instance",
    "azure-nd-a100": "azure-native:compute:VirtualMachine",
}


def plan_with_state(
    stack: str, *, created_at: int | None, state_ttl: int = 240, **overrides: Any
) -> tuple[Any, list[str]]:
    """Plan `stack` (its expiry from the Expiry resource, never fixed) as a re-apply over a
    state whose Expiry was first applied at `created_at` (None: a first plan); the plan or the
    error it raised, and the types of the resources registered."""
    made = Plan()
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack).with_(**overrides)

    def program() -> dict[str, Any]:
        return stackconfig.exports(stackconfig.build(spec))

    def run() -> Any:
        return evaluate(program, config=stackconfig.pulumi_config(config), stack=stack, into=made)

    try:
        if created_at is None:
            return run(), [r.type for r in made.resources]
        with expiry.applied(created_at, state_ttl):
            return run(), [r.type for r in made.resources]
    except SpecError as e:
        return e, [r.type for r in made.resources]


@pytest.mark.parametrize("stack", list(STACKS))
def test_a_re_apply_after_the_expiry_in_state_is_refused_and_creates_no_node(stack):
    """`pulumi up --refresh` five hours into a 4-hour cluster: the refresh dropped the
    instances that removed themselves, the Expiry in state says 4 hours after creation, and
    the program must not register the nodes again (they would delete themselves at once)."""
    created = int(time.time()) - 5 * HOUR
    err, registered = plan_with_state(stack, created_at=created)
    nodes = registered.count(STACKS[stack])
    assert isinstance(err, SpecError), f"not refused: {nodes} nodes registered past expiry"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created + 4 * HOUR))
    assert err.field == "expires_at"
    assert f"expired at {when}" in err.message
    assert "`pulumi destroy`" in err.hint and "gpufleet down" in err.hint
    assert "ttl_minutes" in err.hint
    assert STACKS[stack] not in registered, "a node was registered past its expiry"


def test_a_cluster_within_its_expiry_is_re_applied_with_the_state_s_expiry():
    created = int(time.time()) - HOUR
    plan, registered = plan_with_state("aws-p4d", created_at=created)
    assert not isinstance(plan, Exception), str(plan)
    assert plan.outputs["expires_at"] == created + 4 * HOUR  # the state's, not this run's
    assert registered.count(STACKS["aws-p4d"]) == 2


def test_a_first_plan_is_never_refused():
    """No state yet: the plan's creation time is epoch 0 (expiry.PLANNED_CREATED_AT), so its
    expiry reads as ttl_minutes after creation, not as a past time."""
    plan, _ = plan_with_state("aws-p4d", created_at=None)
    assert not isinstance(plan, Exception), str(plan)
    assert plan.outputs["expires_at"] == 240 * 60


def test_the_fix_a_new_ttl_after_expiry_counts_from_now():
    """The refusal's fix "raise ttl_minutes" works: after expiry the Expiry's update starts
    the clock again, where before expiry it counts from the first apply (test_reapply.py)."""
    created = int(time.time()) - 5 * HOUR
    before = int(time.time())
    plan, registered = plan_with_state("aws-p4d", created_at=created, ttl_minutes=360)
    assert not isinstance(plan, Exception), str(plan)
    # 6 h from now, not 6 h after the first apply (1 h from now)
    assert before + 6 * HOUR <= plan.outputs["expires_at"] <= int(time.time()) + 6 * HOUR
    assert registered.count(STACKS["aws-p4d"]) == 2


def test_the_expiry_provider_restarts_the_clock_only_after_expiry(monkeypatch):
    provider = expiry._ExpiryProvider()
    monkeypatch.setattr("time.time", lambda: 1_800_000_000)
    created = provider.create({"ttl_minutes": 240}).outs
    news = {"ttl_minutes": 300, "created_at": None, "expires_at": None}
    monkeypatch.setattr("time.time", lambda: 1_800_000_000 + 3 * HOUR)  # still alive
    assert provider.update("id", created, news).outs["expires_at"] == 1_800_000_000 + 5 * HOUR
    monkeypatch.setattr("time.time", lambda: 1_800_000_000 + 9 * HOUR)  # expired at 4 h
    late = provider.update("id", created, news).outs
    assert late["created_at"] == 1_800_000_000 + 9 * HOUR
    assert late["expires_at"] == 1_800_000_000 + 14 * HOUR


def test_a_fixed_expiry_in_the_past_is_refused_before_any_node():
    config = stackconfig.stack_config("aws-p4d")
    spec = stackconfig.spec_from_config(config, stack="aws-p4d")
    made = Plan()
    past = int(time.time()) - HOUR
    with pytest.raises(SpecError) as e:
        evaluate(
            lambda: stackconfig.exports(stackconfig.build(spec, expires_at=past)),
            config=stackconfig.pulumi_config(config),
            into=made,
        )
    assert "expired at" in e.value.message
    assert [r.type for r in made.resources] == [
        "gpufleet:index:AwsGpuFleet"
    ]  # the component itself, no child
