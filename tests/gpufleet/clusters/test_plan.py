"""The offline plan's price: billed at the rate the stack asks for, and said which it is."""

from __future__ import annotations

import dataclasses
import re
from datetime import date
from types import SimpleNamespace

import pytest

from gpufleet.clusters.plan import check_stack, plan_stack, price_estimate
from gpufleet.components import stackconfig
from gpufleet.components.catalog import lookup
from gpufleet.core.errors import GpufleetError


def test_spot_stack_without_a_catalog_spot_price_says_it_shows_on_demand():
    """AWS bills a Spot Instance at the Spot price in effect for its zone, not the On-Demand
    price (EC2 user guide, using-spot-instances.md "Pricing and savings"); GCP bills Spot VMs
    at Spot prices (compute/docs/instances/spot "Pricing"). Without a sourced spot price the
    plan must say that its figure is on-demand, not pass it off as the spot cost."""
    # a3-highgpu-8g has no spot price: its source rows are not trustworthy (docs/clouds.md)
    doc = plan_stack("gcp-a3", overrides={"spot": True})
    assert lookup("gcp", doc["instance_type"]).spot_price_per_hour is None
    assert doc["spot"] and doc["price_basis"] == "on-demand"
    assert "no spot price in the catalog" in doc["price_note"]
    assert doc["spot_price_basis"] is None and doc["price_old"] is False
    assert doc["estimated_usd_per_hour"] == round(doc["nodes"] * doc["on_demand_per_node_hour"], 3)


def test_a_gcp_spot_stack_is_priced_at_host_plus_gpus_spot():
    """gcp-a2 (2 x a2-highgpu-8g, spot): GCP bills the host and the GPUs of an A2 VM as separate
    SKUs, and skypilot-catalog v8 gcp vms.csv at commit 8427bbff has them as two rows with the
    same SpotPrice in each us-central1 zone: the a2-highgpu-8g host 2.958 and A100 x 8 11.4728."""
    doc = plan_stack("gcp-a2")
    assert doc["spot"] and doc["price_basis"] == "spot"
    assert doc["price_per_node_hour"] == pytest.approx(2.958 + 11.4728)
    assert doc["estimated_usd_per_hour"] == round(2 * (2.958 + 11.4728), 3)
    assert doc["spot_price_basis"].startswith("host+gpus zone-median: ")
    assert "4 zones in us-central1" in doc["spot_price_basis"]
    assert not re.search(r"\(\d", doc["spot_price_basis"])  # the zones agree: no spread shown


def test_spot_stack_with_a_catalog_spot_price_shows_it_with_date_basis_and_age():
    """aws-g5 (2 x g5.12xlarge, spot) is priced at the catalog's dated spot price: the median
    of its us-east-1 zones, 2.1824 $/h in skypilot-catalog v8 aws vms.csv at commit 00148f2a
    (use1-az5; the five zones 2.0796-2.7804), recorded on or before 2026-11-09."""
    doc = plan_stack("aws-g5")
    assert doc["spot"] and doc["price_basis"] == "spot"
    assert doc["price_per_node_hour"] == 2.1824
    assert doc["estimated_usd_per_hour"] == round(2 * 2.1824, 3)
    assert doc["on_demand_per_node_hour"] == 5.672  # kept, to compare
    assert doc["price_date"] == "2026-11-09"
    assert doc["spot_price_basis"] == "zone-median: the median of 5 zones in us-east-1 (2.08-2.78)"
    age = (date.today() - date(2026, 11, 9)).days
    assert doc["price_age_days"] == age and doc["price_old"] is (age > 90)
    assert "2026-11-09" in doc["price_note"] and "zone-median" in doc["price_note"]
    assert "00148f2af3672e2229b4f7bf8157d5a3f36e3c35" in doc["price_note"]


def test_a_spot_price_older_than_90_days_is_said_to_be_old():
    """90 days (catalog.SPOT_STALE_DAYS): spot prices move daily to monthly, so a quarter-old
    figure is flagged, not silently used. Day 90 is not old; day 91 is."""
    it = lookup("aws", "g5.12xlarge")  # spot price of 2026-11-09
    fresh = price_estimate(it, 2, spot=True, today=date(2026, 11, 25))
    assert fresh["price_age_days"] == 16 and not fresh["price_old"]
    assert not fresh["price_note"].startswith("OLD")
    edge = price_estimate(it, 2, spot=True, today=date(2027, 2, 7))
    assert edge["price_age_days"] == 90 and not edge["price_old"]
    old = price_estimate(it, 2, spot=True, today=date(2027, 2, 8))
    assert old["price_age_days"] == 91 and old["price_old"]
    assert old["price_note"].startswith("OLD spot price, over 90 days: spot price of 2026-11-09")
    # Still the spot figure: old is said, not replaced by a guess.
    assert old["estimated_usd_per_hour"] == fresh["estimated_usd_per_hour"]


@pytest.mark.parametrize("stack", ["aws-g5", "gcp-a2"])
def test_spot_estimate_uses_the_catalog_spot_price_where_it_has_one(stack):
    """A spot fleet is billed at the spot rate (see above): estimated at it where known."""
    doc = plan_stack(stack)
    it = lookup(doc["cloud"], doc["instance_type"])
    priced = dataclasses.replace(
        it,
        spot_price_per_hour=round(it.price_per_hour / 3, 4),
        spot_price_date="2026-11-01",
        spot_price_source="a dated spot table",
    )
    est = price_estimate(priced, doc["nodes"], spot=True)
    assert est["price_basis"] == "spot"
    assert est["estimated_usd_per_hour"] == round(doc["nodes"] * priced.spot_price_per_hour, 3)
    assert est["estimated_usd_per_hour"] < doc["nodes"] * it.price_per_hour
    assert "2026-11-01" in est["price_note"]
    # The same type on demand is priced on demand, spot price or not.
    assert price_estimate(priced, doc["nodes"], spot=False)["price_basis"] == "on-demand"


def test_on_demand_stack_is_priced_on_demand():
    doc = plan_stack("aws-p4d")
    assert doc["price_basis"] == "on-demand" and doc["price_note"] == "on-demand"
    price = lookup("aws", doc["instance_type"]).price_per_hour
    assert doc["on_demand_per_node_hour"] == doc["price_per_node_hour"] == price
    assert doc["estimated_usd_per_hour"] == round(doc["nodes"] * price, 3)


def test_two_plans_of_a_stack_are_the_same_document(monkeypatch):
    """Two plans of one unchanged stack must be identical (issue 7 item 2): whatever order
    Pulumi's threads register resources in, and whatever the clock says."""
    import json

    first = json.dumps(plan_stack("aws-p4d"))
    monkeypatch.setattr("time.time", lambda: 2_000_000_000)
    assert json.dumps(plan_stack("aws-p4d")) == first


@pytest.mark.parametrize(
    ("stack", "status", "source"),
    [
        ("aws-p5", "offline", "stand-in for EC2 DescribeInstanceTypeOfferings"),
        ("gcp-a3", "offline", "zone table"),
        ("azure-nd-h100", "not-checked", "no credentials offline"),
    ],
)
def test_plan_says_how_far_region_availability_was_checked(stack, status, source):
    """An offline plan cannot ask the cloud: it says whose answer it shows (a stand-in for
    EC2's offerings API, GCP's zone table) or that nothing was checked (Azure's SKU list needs
    a token), never that the cloud confirmed it."""
    doc = plan_stack(stack)
    assert doc["availability"]["status"] == status
    assert source in doc["availability"]["source"]


@pytest.mark.parametrize("stack", ["aws-p5", "gcp-a3", "azure-nd-h100"])
def test_offline_plan_lists_each_validator_as_skipped_with_the_reason(stack, monkeypatch):
    """Offline (no account), every validator of the stack's cloud is in `checks`, in order,
    skipped with the reason; one stand-in validator makes it non-empty before the clouds' own
    lists land (components/<cloud>/validators.py)."""
    from gpufleet.components import validators

    def must_not_run(spec, it):
        raise AssertionError("a validator ran offline")

    spec = stackconfig.spec_from_stack(stack)
    own = validators.cloud_validators(spec.cloud)
    extra = validators.Validator(spec.cloud, "a stand-in fact", "Stand.In", must_not_run)
    monkeypatch.setattr(validators, "cloud_validators", lambda cloud: [*own, extra])
    checks = plan_stack(stack)["checks"]
    assert [(c["fact"], c["api"]) for c in checks] == [(v.fact, v.api) for v in [*own, extra]]
    assert {c["status"] for c in checks} == {"skipped"}
    assert {c["detail"] for c in checks} == {validators.OFFLINE}
    assert "plan --check" in validators.OFFLINE


class FakeStacks:
    """The Automation API's stacks in a backend, as check_stack reaches them through
    provision/pulumi.py: `_stack` creates or selects one (create_or_select_stack), a stack
    has config (get_all_config / set_config), `preview`, and `workspace.remove_stack`."""

    def __init__(self, preview_error: Exception | None = None):
        self.config: dict[str, dict[str, str]] = {}
        self.previewed: list[str] = []
        self.removed: list[str] = []
        self.preview_error = preview_error

    def stack(self, spec_or_name, _backend, _program=None):
        fake = self
        name = spec_or_name if isinstance(spec_or_name, str) else spec_or_name.name
        fake.config.setdefault(name, {})

        class Stack:
            def __init__(self):
                self.name, self.workspace = name, self

            def get_all_config(self):
                return {k: SimpleNamespace(value=v) for k, v in fake.config[name].items()}

            def set_config(self, key, value):
                fake.config[name][key] = value.value

            def preview(self, **_):
                fake.previewed.append(name)
                if fake.preview_error:
                    raise fake.preview_error

            def remove_stack(self, stack_name):
                fake.removed.append(stack_name)
                fake.config.pop(stack_name)

        return Stack()


@pytest.fixture
def stacks(monkeypatch):
    from gpufleet.provision import pulumi as pp

    fake = FakeStacks()
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda _cloud=None: None)
    monkeypatch.setattr(pp, "_stack", fake.stack)
    return fake


def test_check_previews_on_a_scratch_stack_and_removes_it(stacks):
    """Review of issue 19: `plan --check` previewed on the cluster's own stack
    (create_or_select_stack + set_provider_config), so it left an empty stack for `sweep` to
    list, and run against a live cluster's name rewrote that stack's config."""
    stacks.config["aws-p5"] = {"aws:region": "eu-west-1"}  # a live cluster's stack
    assert check_stack("aws-p5") == []  # the fake preview runs no program
    (scratch,) = stacks.previewed
    assert re.fullmatch(r"aws-p5-check-[0-9a-f]{8}", scratch)
    assert stacks.removed == [scratch]
    assert stacks.config == {"aws-p5": {"aws:region": "eu-west-1"}}  # untouched, nothing left


def test_a_failed_check_still_removes_its_scratch_stack(stacks):
    stacks.preview_error = RuntimeError("error: no credentials")
    with pytest.raises(GpufleetError, match="pulumi preview of aws-p5 failed"):
        check_stack("aws-p5")
    assert stacks.removed == stacks.previewed and stacks.config == {}
