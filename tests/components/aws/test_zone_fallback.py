"""`up` without a zone: when the zone the AWS component picked has no capacity, the other
zones that offer the type are tried in turn (before, only a spec listing `zones` fell back)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.preview import evaluate
from gpufleet.provision import pulumi as pp

# EC2 user guide, troubleshooting-launch.html "Insufficient instance capacity" (read
# 2026-11-25): InsufficientInstanceCapacity means AWS has not enough capacity of the type in
# that Availability Zone now; try again later, or "submit a new request without specifying an
# Availability Zone" / in a different zone.
ICE = "InsufficientInstanceCapacity"
# The zones the mocks' EC2 offers every type in (components/aws/mocks.py OFFERED_IN, us-east-1).
OFFERED = ["us-east-1b", "us-east-1d", "us-east-1f"]


class ProgramStack:
    """A stack whose `up` runs the inline program under mocks (so the component picks its
    zone), then fails with EC2's capacity error in the zones of `full`."""

    def __init__(self, program: Any, full: set[str], calls: list):
        self.program, self.full, self.calls, self.name = program, full, calls, "t"
        self.workspace = self
        self.zone: str | None = None

    def set_config(self, *_: Any) -> None:
        pass

    def get_all_config(self) -> dict:
        return {}

    def up(self, **_: Any) -> Any:
        subnets: list[str] = []

        def run() -> None:
            self.program()

        plan = evaluate(run, config={"aws:region": "us-east-1"})
        subnets = [r.inputs["availabilityZone"] for r in plan.of_type("aws:ec2/subnet:Subnet")]
        self.zone = subnets[0]
        self.calls.append(("up", self.zone))
        if self.zone in self.full:
            raise Exception(f"error: creating EC2 Instance: {ICE}: no capacity in {self.zone}")
        outputs = {"cluster_name": "c"}
        return SimpleNamespace(outputs={k: SimpleNamespace(value=v) for k, v in outputs.items()})

    def destroy(self, **_: Any) -> None:
        self.calls.append(("destroy", self.zone))

    def remove_stack(self, _name: str) -> None:
        pass


class Info(dict):
    """The stack's outputs, standing in for the ClusterInfo `up` returns."""

    provider: dict = {}  # noqa: RUF012 (read only)


def up(monkeypatch, s: ClusterSpec, full: set[str]) -> tuple[list, Any]:
    calls: list = []
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(
        pp, "_stack", lambda sp, _b, program=None: ProgramStack(program, full, calls)
    )
    monkeypatch.setattr(pp.PulumiProvisioner, "_info", lambda self, name, outputs: Info(outputs))
    monkeypatch.setattr(pp, "with_ssh_cidrs", lambda sp: sp)
    # The host keys are pinned from the cloud after `up`; no cloud here (its test: test_pulumi).
    monkeypatch.setattr(pp.hostkeypin, "pin_published", lambda *a, **k: None)
    try:
        return calls, pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    except pp.GpufleetError as e:
        return calls, e


def aws_spec(**kw: Any) -> ClusterSpec:
    config = stackconfig.stack_config("aws-p4d")
    return stackconfig.spec_from_config(config, stack="aws-p4d").with_(**kw)


def test_without_a_zone_the_other_offering_zones_are_tried(gpufleet_home, monkeypatch):
    calls, result = up(monkeypatch, aws_spec(), full={OFFERED[0]})
    assert calls == [("up", OFFERED[0]), ("destroy", OFFERED[0]), ("up", OFFERED[1])]
    assert result == {"cluster_name": "c"}


def test_without_a_zone_every_offering_zone_is_named_when_none_has_capacity(
    gpufleet_home, monkeypatch
):
    calls, err = up(monkeypatch, aws_spec(), full=set(OFFERED))
    assert [c for c in calls if c[0] == "up"] == [("up", z) for z in OFFERED]
    assert isinstance(err, pp.CapacityError) and err.zones == OFFERED
    assert ", ".join(OFFERED) in err.message


@pytest.mark.parametrize(
    "kw",
    [
        {"zone": "us-east-1d"},
        {"vpc_id": "vpc-0abc", "subnet_id": "subnet-0abc"},
    ],
)
def test_a_named_zone_or_subnet_is_not_left(kw):
    """A named zone (or a subnet, which has one) is what the user asked for: no fallback."""
    from gpufleet.components.aws.offers import zone_fallback

    found: list[list[str]] = []
    evaluate(
        lambda: found.append(zone_fallback(aws_spec(**kw), "p4d.24xlarge")),
        config={"aws:region": "us-east-1"},
    )
    assert found == [[]]
