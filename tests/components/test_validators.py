"""The validator layer: skipped offline with the reason, run against a fake account, and the
first refusal stops the program before any resource is registered."""

from __future__ import annotations

import pytest

from gpufleet.components import stackconfig, validators
from gpufleet.components.preview import evaluate
from gpufleet.components.validators import (
    AccountError,
    FakeAccount,
    Unanswered,
    Validator,
    refuse,
)

TOKEN = "test:index/getQuota:getQuota"


def _quota_check(spec, it):
    import pulumi

    answer = pulumi.runtime.invoke(TOKEN, {"name": it.name}).value
    value = int(answer["value"])  # a protobuf number arrives as a float
    if value < spec.nodes:
        raise refuse(QUOTA, f"quota is {value}", "ask for more")
    return f"quota {value}, need {spec.nodes}"


QUOTA = Validator("aws", "the quota covers the fleet", "Test GetQuota", _quota_check)


def _plan(
    stack: str, account: FakeAccount | None, monkeypatch: pytest.MonkeyPatch, checks=(QUOTA,)
):
    monkeypatch.setattr(validators, "cloud_validators", lambda cloud: list(checks))
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack)
    built = []

    def program():
        built.append(stackconfig.build(spec))
        return stackconfig.exports(built[0])

    plan = evaluate(program, config=stackconfig.pulumi_config(config), account=account)
    return built[0], plan


def test_offline_each_validator_is_skipped_with_the_reason(monkeypatch):
    fleet, _ = _plan("aws-g5", None, monkeypatch)
    assert [(c.fact, c.status) for c in fleet.checks] == [(QUOTA.fact, "skipped")]
    assert "offline" in fleet.checks[0].detail


def test_a_fake_account_that_has_room_passes_and_says_what_it_found(monkeypatch):
    account = FakeAccount(invokes={TOKEN: lambda args: {"value": 64}})
    fleet, plan = _plan("aws-g5", account, monkeypatch)
    assert fleet.checks[0].status == "passed"
    assert fleet.checks[0].detail.startswith("quota 64, need ")
    assert plan.of_type("aws:ec2/instance:Instance")


def test_a_refusal_stops_before_any_cloud_resource_is_registered(monkeypatch):
    account = FakeAccount(invokes={TOKEN: lambda args: {"value": 0}})
    with pytest.raises(Exception) as caught:
        _plan("aws-g5", account, monkeypatch)
    err = caught.value
    while not isinstance(err, AccountError) and err.__cause__ is not None:
        err = err.__cause__
    assert isinstance(err, AccountError), repr(caught.value)
    assert err.fact == QUOTA.fact and "quota is 0" in str(err) and err.hint == "ask for more"


def test_a_fact_the_account_cannot_answer_is_skipped_with_the_reason(monkeypatch):
    def disabled(args):
        raise Unanswered("the Cloud Quotas API is not enabled in the project")

    account = FakeAccount(invokes={TOKEN: lambda args: {"value": 64}})
    unanswerable = Validator("aws", "an unanswerable fact", "Test Get", lambda s, i: disabled({}))
    fleet, _ = _plan("aws-g5", account, monkeypatch, checks=(unanswerable, QUOTA))
    first, second = fleet.checks
    assert (first.status, first.detail) == (
        "skipped",
        "not answered: the Cloud Quotas API is not enabled in the project",
    )
    assert second.status == "passed"
