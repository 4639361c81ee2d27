"""Cost before a cluster exists: the spec's own region's price, the total at TTL, the cap."""

from __future__ import annotations

import pytest

from gpufleet.clusters import cost
from gpufleet.components.catalog import lookup
from gpufleet.components.clusterspec import ClusterSpec


def spec(**kw) -> ClusterSpec:
    base = {"name": "c", "cloud": "aws", "instance_type": "p4d.24xlarge", "nodes": 2}
    return ClusterSpec.from_input({**base, **kw})


def test_price_per_hour_and_total_at_ttl_come_from_the_catalog():
    price = lookup("aws", "p4d.24xlarge").price_per_hour
    e = cost.estimate(spec(ttl_minutes=90))
    assert e.usd_per_hour == pytest.approx(2 * price, abs=0.001)
    assert e.usd_at_ttl == pytest.approx(2 * price * 1.5, abs=0.01)
    assert e.gpus == 16


def test_another_regions_price_is_not_shown_as_this_regions():
    e = cost.estimate(spec(region="eu-west-1"))
    assert e.usd_per_hour is None and e.usd_at_ttl is None
    assert "price in eu-west-1 not known" in e.price_note


def test_budget_cap_refuses_over_and_unknown_and_allows_under():
    e = cost.estimate(spec(ttl_minutes=60))
    cost.check_budget(e, e.usd_at_ttl + 1)
    with pytest.raises(cost.OverBudget, match="over"):
        cost.check_budget(e, e.usd_at_ttl - 1)
    with pytest.raises(cost.OverBudget, match="cannot enforce"):
        cost.check_budget(cost.estimate(spec(region="eu-west-1")), 1000)


def test_local_is_free_and_never_capped():
    e = cost.estimate(ClusterSpec.from_input({"name": "l"}))
    assert e.usd_per_hour == 0
    cost.check_budget(e, 0.0)


def test_spot_is_estimated_at_the_catalog_spot_price_as_plan_does(monkeypatch):
    """A Spot Instance is billed at the Spot price, not the On-Demand one (EC2 user guide,
    using-spot-instances.md "Pricing and savings"): `up --spot --dry-run` and `gpufleet plan`
    must show the same figure for it."""
    import dataclasses

    from gpufleet.clusters.plan import price_estimate
    from gpufleet.components import catalog

    it = lookup("aws", "p4d.24xlarge")
    priced = dataclasses.replace(
        it, spot_price_per_hour=10.5, spot_price_date="2026-11-01", spot_price_source="a table"
    )
    monkeypatch.setattr(catalog, "lookup", lambda cloud, name: priced)
    e = cost.estimate(spec(spot=True, ttl_minutes=60))
    assert e.usd_per_hour == price_estimate(priced, 2, spot=True)["estimated_usd_per_hour"] == 21
    assert e.usd_at_ttl == 21 and "2026-11-01" in e.price_note
    on_demand = cost.estimate(spec(spot=False))
    assert on_demand.usd_per_hour == round(2 * it.price_per_hour, 3)


def test_spot_without_a_catalog_spot_price_says_on_demand_is_an_upper_bound():
    it = lookup("aws", "p5.4xlarge")  # the source has no us-east-1 spot price for it
    assert it.spot_price_per_hour is None
    e = cost.estimate(spec(spot=True, instance_type="p5.4xlarge"))
    assert e.usd_per_hour == round(2 * it.price_per_hour, 3)
    assert "upper bound for spot" in e.price_note and e.spot_price_basis is None


def test_dry_run_estimate_of_a_catalog_spot_price_carries_its_date_and_basis():
    """g5.12xlarge's catalog spot price: 2.1824 $/h, the median us-east-1 zone in
    skypilot-catalog v8 aws vms.csv at commit 00148f2a, of 2026-11-09; on demand 5.672."""
    g5 = {
        "name": "t",
        "cloud": "aws",
        "instance_type": "g5.12xlarge",
        "nodes": 2,
        "ttl_minutes": 60,
    }
    e = cost.estimate(ClusterSpec.from_input({**g5, "spot": True}))
    assert e.usd_per_hour == round(2 * 2.1824, 3) == 4.365 and e.usd_at_ttl == pytest.approx(
        4.365, abs=0.01
    )
    assert e.price_date == "2026-11-09" and e.spot_price_basis.startswith("zone-median")
    assert "spot, us-east-1, spot price of 2026-11-09" in e.price_note
    cost.check_budget(e, 6.0)  # at spot it fits; at on demand (11.34) it would not
    with pytest.raises(cost.OverBudget):
        cost.check_budget(cost.estimate(ClusterSpec.from_input(g5)), 6.0)
