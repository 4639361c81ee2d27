"""What a cluster costs before it exists: $/hour, the total at its TTL, a budget cap."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.provision import traits


class OverBudget(GpufleetError):
    """--max-cost is below what the cluster costs at its TTL (or its price is unknown)."""

    exit_code = ExitCode.USAGE

    def __init__(self, limit: float, total: float | None, why: str):
        super().__init__(
            f"max_cost: {why}; nothing was created",
            hint="raise --max-cost, shorten --ttl, or use fewer or smaller nodes",
        )
        self.limit = limit
        self.total = total


@dataclass(frozen=True)
class Estimate:
    cloud: str
    instance_type: str | None
    nodes: int
    gpus: int
    region: str | None
    spot: bool
    ttl_minutes: int
    price_per_node_hour: float | None  # billed rate (spot if known), in `region`; None: unknown
    price_note: str
    price_date: str | None = None  # the date of the price it uses (the spot one when spot)
    spot_price_basis: str | None = None  # how the spot figure was made from the zones' prices
    price_old: bool = False  # the spot price is older than catalog.SPOT_STALE_DAYS
    # What --max-cost checks: for spot the highest zone's price (plan.spot_budget_price), as a
    # cluster runs in one zone and the estimate is the zones' median; else price_per_node_hour.
    budget_price_per_node_hour: float | None = None
    budget_price_note: str = ""

    @property
    def usd_per_hour(self) -> float | None:
        if self.price_per_node_hour is None:
            return None
        return round(self.nodes * self.price_per_node_hour, 3)

    @property
    def usd_at_ttl(self) -> float | None:
        if self.usd_per_hour is None or not self.ttl_minutes:
            return None
        return round(self.usd_per_hour * self.ttl_minutes / 60, 2)

    @property
    def budget_usd_at_ttl(self) -> float | None:
        if self.budget_price_per_node_hour is None or not self.ttl_minutes:
            return None
        return round(self.nodes * self.budget_price_per_node_hour * self.ttl_minutes / 60, 2)

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "usd_per_hour": self.usd_per_hour,
            "usd_at_ttl": self.usd_at_ttl,
            "budget_usd_at_ttl": self.budget_usd_at_ttl,
        }


def estimate(spec: ClusterSpec) -> Estimate:
    """The spec's price, in the spec's own region only: another region's is not shown as it."""
    price: float | None = 0.0
    note = "free: runs on this machine"  # local sshds, or QEMU VMs
    dated: dict = {}
    provider = traits(spec.cloud)
    if provider.bills:
        from gpufleet.components.catalog import lookup

        it = lookup(spec.cloud, spec.instance_type or "")
        region = spec.effective_region
        if not it.price_per_hour:
            price, note = None, "no price in the catalog"
        elif it.price_region and region != it.price_region:
            price = None
            note = (
                f"price in {region} not known (the catalog has {it.price_region}'s: "
                f"${it.price_per_hour:.2f}/node-hour)"
            )
        else:
            from gpufleet.clusters.plan import price_estimate

            # the rate it is billed at: spot where the catalog has a spot price (as `plan`)
            billed = price_estimate(it, spec.nodes, spec.spot, zones=spec.zone_choices)
            price = billed["price_per_node_hour"]
            dated = {
                "budget_price_per_node_hour": billed["budget_price_per_node_hour"],
                "budget_price_note": billed["budget_price_note"],
                "price_date": billed["price_date"],
                "spot_price_basis": billed["spot_price_basis"],
                "price_old": billed["price_old"],
            }
            if billed["price_basis"] == "spot":
                note = f"spot, {it.price_region}, {billed['price_note']}"
            else:
                note = f"on demand, {it.price_region}, catalog prices of {it.price_date}"
                if spec.spot:
                    note += "; no spot price in the catalog: an upper bound for spot"
    elif provider.own_hosts:
        price, note = None, "your own machines"
    return Estimate(
        cloud=spec.cloud,
        instance_type=spec.instance_type,
        nodes=spec.nodes,
        gpus=spec.nodes * spec.gpus,
        region=spec.effective_region,
        spot=spec.spot,
        ttl_minutes=spec.ttl_minutes,
        price_per_node_hour=price,
        price_note=note,
        **{"budget_price_per_node_hour": price, **dated},
    )


def remaining(spec: ClusterSpec, expires_at: float | None, now: float) -> Estimate:
    """A running cluster's estimate: its TTL is what is left of it until it expires (what
    a run on it can cost at most if the CLI dies), in whole minutes, rounded up."""
    est = estimate(spec)
    if expires_at is None:
        return replace(est, ttl_minutes=0, price_note=f"{est.price_note}; it never expires")
    return replace(est, ttl_minutes=max(1, math.ceil((expires_at - now) / 60)))


def money(usd: float | None) -> str:
    return "unknown" if usd is None else f"${usd:,.2f}"


def summary(e: Estimate) -> list[str]:
    """The plan summary shown before a cloud cluster is created."""
    where = f"{e.cloud} {e.region}" if e.region else e.cloud
    kind = f"{e.nodes} x {e.instance_type or e.cloud}" + (" (spot)" if e.spot else "")
    ttl = f"{e.ttl_minutes / 60:g}h" if e.ttl_minutes else "none"
    lines = [
        f"  nodes      {kind}, {e.gpus} GPUs, in {where}",
        f"  price      {money(e.usd_per_hour)}/hour ({e.price_note})",
        f"  expires    after {ttl} (node-side TTL)",
        f"  at TTL     {money(e.usd_at_ttl)} if it runs until it expires",
    ]
    if e.budget_price_per_node_hour != e.price_per_node_hour:
        lines.append(
            f"  budget     {money(e.budget_usd_at_ttl)} at TTL: --max-cost checks "
            f"${e.budget_price_per_node_hour:.2f}/node-hour, {e.budget_price_note}"
        )
    return lines


def check_budget(e: Estimate, max_cost: float | None) -> None:
    """--max-cost: refuse when the cost at TTL exceeds it, or cannot be known. Spot is
    checked at its upper bound (budget_price_per_node_hour: the highest zone's price, never
    above on demand), not at the zones' median the estimate shows."""
    if max_cost is None:
        return
    total = e.budget_usd_at_ttl
    if not traits(e.cloud).bills:
        return
    if total is None:
        raise OverBudget(max_cost, None, f"cannot enforce ${max_cost:.2f}: {e.price_note}")
    if total > max_cost:
        at, how = "", "about"
        if e.budget_price_per_node_hour != e.price_per_node_hour:
            how, at = (
                "up to",
                (
                    f" at ${e.budget_price_per_node_hour:.2f}/node-hour, {e.budget_price_note} "
                    f"(at the estimate's ${e.price_per_node_hour:.2f}, {money(e.usd_at_ttl)})"
                ),
            )
        raise OverBudget(
            max_cost,
            total,
            f"{e.nodes} x {e.instance_type} for {e.ttl_minutes / 60:g}h costs {how} "
            f"${total:.2f}{at}, over {max_cost:g} USD (the cap)",
        )
