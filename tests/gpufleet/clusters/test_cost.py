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


def test_max_cost_checks_spot_at_the_highest_zone_not_the_median():
    """p5.48xlarge spot in us-east-1 (catalog, skypilot-catalog v8 of 2026-11-09): six zones
    17.63-55.04 $/h, median 23.45. A cluster runs in one zone, so 2 nodes for 1 h are estimated
    at 46.91 $ but may cost 110.08 $: a 100 $ cap must refuse it and say which price it used."""
    p5 = spec(instance_type="p5.48xlarge", spot=True, ttl_minutes=60)
    e = cost.estimate(p5)
    assert e.price_per_node_hour == 23.45325 and e.usd_at_ttl == 46.91
    assert e.budget_price_per_node_hour == 55.04 and e.budget_usd_at_ttl == 110.08
    with pytest.raises(cost.OverBudget) as refused:
        cost.check_budget(e, 100)
    text = str(refused.value)
    assert "costs up to $110.08 at $55.04/node-hour" in text
    assert "the highest zone's spot price (use1-az1, of 6 zones 17.63-55.04)" in text
    assert "a cluster runs in one zone" in text and "the estimate's $23.45, $46.91" in text
    assert refused.value.total == 110.08
    cost.check_budget(e, 111)
    # a named AWS zone is a name (us-east-1a); the source lists IDs (use1-az1): the highest
    named = cost.estimate(spec(instance_type="p5.48xlarge", spot=True, zone="us-east-1a"))
    assert named.budget_price_per_node_hour == 55.04
    assert "us-east-1a cannot be matched" in named.budget_price_note
    assert any("--max-cost checks $55.04/node-hour" in line for line in cost.summary(e))
    assert e.as_dict()["budget_usd_at_ttl"] == 110.08


def test_spot_budget_price_uses_a_named_zone_when_listed_and_never_exceeds_on_demand():
    """Zone names that the source lists as themselves (GCP's us-central1-a) are matched; the
    entry is the catalog's p4d.24xlarge with made-up zones (what is tested is the choice)."""
    import dataclasses

    from gpufleet.clusters.plan import spot_budget_price

    it = dataclasses.replace(
        lookup("aws", "p4d.24xlarge"),
        spot_price_zones={"z-a": 3.0, "z-b": 9.0, "z-c": 40.0},
        spot_price_per_hour=9.0,
    )
    assert spot_budget_price(it, ["z-a"]) == (3.0, "the spot price of zone z-a")
    assert spot_budget_price(it, ["z-a", "z-b"])[0] == 9.0
    price, why = spot_budget_price(it, ["z-x"])  # not listed: the highest, capped at on demand
    assert price == it.price_per_hour == 21.958 and why.startswith("on demand, below")
    assert spot_budget_price(dataclasses.replace(it, spot_price_zones={}), [])[0] == 9.0
