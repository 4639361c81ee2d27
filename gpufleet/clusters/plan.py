"""Offline plan of a stack: every resource its program registers under mocks, and its $/hour."""

from __future__ import annotations

import contextlib
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

SECRET_OUTPUTS = ("ssh_private_key",)
# Inputs that are long blobs: a plan shows their size, `gpufleet image render` their text.
BLOB_INPUTS = ("userData", "user_data", "customData", "custom_data", "metadata", "publicKey")


def canonical(value: Any) -> Any:
    """Mappings with sorted keys, all the way down (lists keep their order: NIC order matters).

    Pulumi registers resources on several threads and inputs arrive in any key order: the plan
    document must not depend on either, so two plans of one stack are byte-identical.
    """
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    return value


# How Pulumi's wire format marks a secret value (pulumi/runtime/rpc.py: _special_sig_key,
# _special_secret_sig).
_SIG_KEY, _SECRET_SIG = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"


def masked(value: Any) -> Any:
    """`value` with every secret (a dict carrying Pulumi's secret signature) as "[secret]"."""
    if isinstance(value, dict):
        if value.get(_SIG_KEY) == _SECRET_SIG:
            return "[secret]"
        return {k: masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked(v) for v in value]
    return value


def _summary(inputs: dict[str, Any]) -> str:
    parts = []
    for k, v in inputs.items():
        if k in BLOB_INPUTS or k == "tags" or k == "labels":
            continue
        text = v if isinstance(v, str) else repr(v)
        parts.append(f"{k}={text[:60]}{'…' if len(text) > 60 else ''}")
    return ", ".join(parts)


_BASIS_WORDS = {
    "zone-max": "the highest",
    "zone-median": "the median",
    "zone-min": "the lowest",
    "host+gpus zone-median": "the median (host + GPUs' spot in each zone)",
    "region": "the one price",
}


def spot_basis(it: Any) -> str:
    """How the entry's spot figure was made, in words: `zone-max: the highest of 5 zones in
    us-east-1 (2.08-2.78)`; the spread shows how much the zones differ."""
    zones = it.spot_price_zones or {}
    words = _BASIS_WORDS.get(it.spot_price_basis or "", it.spot_price_basis or "as given")
    where = f"{len(zones)} zones in {it.price_region}" if zones else str(it.price_region)
    low, high = min(zones.values(), default=0), max(zones.values(), default=0)
    spread = f" ({low:.2f}-{high:.2f})" if low != high else ""
    return f"{it.spot_price_basis}: {words} of {where}{spread}"


def spot_budget_price(it: Any, zones: list[str] | None = None) -> tuple[float, str]:
    """The spot $/node-hour a budget (--max-cost) is checked against, and why: a cluster runs
    in one zone, and the zones' prices differ (p5.48xlarge in us-east-1: 17.63-55.04, median
    23.45), so the highest zone's price, or where every zone the spec names is in the source's
    list, the highest of those (AWS's source lists zone IDs, use1-az1, which map to zone names
    differently per account: never matched, so the highest); never above on demand."""
    prices = it.spot_price_zones or {}
    named = [z for z in zones or [] if z]
    if not prices:
        price, why = it.spot_price_per_hour, "the region's one spot price (no zones in the source)"
    elif named and all(z in prices for z in named):
        price = max(prices[z] for z in named)
        why = (
            f"the spot price of zone {', '.join(named)}"
            if len(named) == 1
            else (f"the highest spot price of zones {', '.join(named)}")
        )
    else:
        zone = max(prices, key=lambda z: prices[z])
        price = prices[zone]
        why = (
            f"the highest zone's spot price ({zone}, of {len(prices)} zones "
            f"{min(prices.values()):.2f}-{price:.2f}): a cluster runs in one zone"
        )
        if named:
            why += f" and {', '.join(named)} cannot be matched to the source's zone IDs"
    if it.price_per_hour and price > it.price_per_hour:
        price, why = it.price_per_hour, f"on demand, below {why}"
    return price, why


def price_estimate(
    it: Any, nodes: int, spot: bool, today: date | None = None, zones: list[str] | None = None
) -> dict[str, Any]:
    """$/hour of the fleet at the rate it will be billed: spot where the catalog has a spot
    price (with its date, basis and age: older than catalog.SPOT_STALE_DAYS is said to be
    old); otherwise on-demand, said so (for spot, an upper bound rather than an estimate).
    budget_price_per_node_hour: what --max-cost checks (spot: spot_budget_price of `zones`)."""
    from gpufleet.components.catalog import SPOT_STALE_DAYS, spot_age_days

    age, old, basis_text = None, False, None
    if spot and it.spot_price_per_hour:
        basis, per_node, date_ = "spot", it.spot_price_per_hour, it.spot_price_date
        age = spot_age_days(it, today)
        old = age is not None and age > SPOT_STALE_DAYS
        basis_text = spot_basis(it)
        note = (
            f"spot price of {date_}, {age} days old, {basis_text} ({it.spot_price_source}); "
            "it changes daily"
        )
        if old:
            note = f"OLD spot price, over {SPOT_STALE_DAYS} days: {note}"
        budget, budget_note = spot_budget_price(it, zones)
    else:
        basis, per_node, date_ = "on-demand", it.price_per_hour, it.price_date
        budget, budget_note = per_node, "on demand"
        note = (
            "no spot price in the catalog: on-demand shown, an upper bound for spot"
            if spot
            else "on-demand"
        )
    return {
        "price_per_node_hour": per_node,
        "price_basis": basis,
        "price_note": note,
        "price_region": it.price_region,
        "price_date": date_,
        "spot_price_basis": basis_text,
        "price_age_days": age,
        "price_old": old,
        "on_demand_per_node_hour": it.price_per_hour,
        "estimated_usd_per_hour": round(nodes * per_node, 3) if per_node else None,
        "budget_price_per_node_hour": budget,
        "budget_price_note": budget_note,
        "budget_usd_per_hour": round(nodes * budget, 3) if budget else None,
    }


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`--set key=value` pairs as gpufleet:cluster fields; a value is read as YAML (120 -> int)."""
    import yaml

    from gpufleet.components.errors import SpecError

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError("--set", f"{pair!r} is not key=value", "write it like ttl_minutes=120")
        try:
            out[key.strip()] = yaml.safe_load(text)
        except yaml.YAMLError:
            out[key.strip()] = text
    return out


def with_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The stack config with `overrides` laid over its gpufleet:cluster mapping."""
    from gpufleet.components import stackconfig

    key = f"{stackconfig.CONFIG_NAMESPACE}:{stackconfig.CONFIG_KEY}"
    cluster = config.get(key)
    return {**config, key: {**(cluster if isinstance(cluster, dict) else {}), **overrides}}


def plan_stack(
    name: str, root: Path | None = None, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The plan document of stack `name` (a stacks/Pulumi.<name>.yaml), with no credentials;
    `overrides`: gpufleet:cluster fields to change first (what `plan --set` compares)."""
    from gpufleet.components import stackconfig
    from gpufleet.components.errors import cloud_sdk

    config = stackconfig.stack_config(name, root)
    if overrides:
        config = with_overrides(config, overrides)
    spec = stackconfig.spec_from_config(config, stack=name)
    with cloud_sdk(spec.cloud):  # the mocks and the component import the cloud's SDK
        from gpufleet.components.preview import evaluate, fewer_collections

        with fewer_collections():  # the document of 1,500 resources too (preview.py)
            return _plan(name, spec, config, evaluate)


def _plan(name: str, spec: ClusterSpec, config: dict[str, Any], evaluate: Any) -> dict[str, Any]:
    from gpufleet.components import catalog, stackconfig

    built: list[Any] = []

    def program() -> dict[str, Any]:
        built.append(stackconfig.build(spec))
        return stackconfig.exports(built[0])

    plan = evaluate(program, config=stackconfig.pulumi_config(config), stack=name)
    it = catalog.lookup(spec.cloud, spec.instance_type or "")
    outputs = {k: ("[secret]" if k in SECRET_OUTPUTS else v) for k, v in plan.outputs.items()}
    return {
        "stack": name,
        "cloud": spec.cloud,
        "instance_type": it.name,
        "nodes": spec.nodes,
        "gpus": spec.nodes * it.gpus,
        "fabric": it.fabric,
        "spot": spec.spot,
        # Under mocks the first apply has not happened: outputs.expires_at counts from epoch 0.
        "expiry": (
            f"{spec.ttl_minutes} min after the first apply, then fixed (stack state)"
            if spec.expires_at is None
            else spec.expires_at
        ),
        **price_estimate(it, spec.nodes, spec.spot, zones=spec.zone_choices),
        # Offline: a stand-in's answer or none, said as such (components/offers.py).
        "availability": built[0].availability.as_dict(),
        # The account's facts (components/validators.py): skipped offline, with the reason.
        "checks": [c.as_dict() for c in built[0].checks],
        "resources": [_resource(r) for r in sorted(plan.resources, key=lambda r: (r.type, r.name))],
        "outputs": canonical(outputs),
    }


def _resource(r: Any) -> dict[str, Any]:
    out = {
        "type": r.type,
        "name": r.name,
        "summary": _summary(canonical(r.inputs)),
        "inputs": canonical(r.inputs),
    }
    # How a re-apply treats a changed input (components/replacements.py): only when set.
    if r.replace_on_changes:
        out["replace_on_changes"] = sorted(r.replace_on_changes)
    if r.delete_before_replace:
        out["delete_before_replace"] = True
    return out


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """What re-applying `new` over a stack planned as `old` does to each changed resource:
    create, delete, update in place, replace (with the inputs that force it), or refused."""
    from gpufleet.components.errors import SpecError
    from gpufleet.components.replacements import diff

    if old.get("stack") != new.get("stack"):
        raise SpecError(
            "--against",
            f"is a plan of stack {old.get('stack')!r}, not of {new.get('stack')!r}",
            f"save a plan of {new.get('stack')} with `gpufleet plan --stack "
            f"{new.get('stack')} --json`",
        )
    return [c.as_dict() for c in diff(old.get("resources", []), new.get("resources", []))]


def load_plan(path: Path) -> dict[str, Any]:
    """A saved `plan --json` document."""
    import json

    from gpufleet.components.errors import SpecError

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SpecError(
            "--against", f"{path} is not a readable plan ({e})", "pass a saved `plan --json`"
        ) from None
    if not isinstance(doc, dict) or doc.get("kind") != "plan":
        raise SpecError("--against", f"{path} is not a `plan --json` document", "pass one")
    return doc


CHECK_FIX = (
    "install the Pulumi CLI (`gpufleet setup pulumi`) and log in to the stack's cloud "
    "(`aws configure`, `gcloud auth application-default login` or `az login`), then run "
    "`gpufleet plan --check` again; without them, `gpufleet plan` shows the checks as skipped"
)


class CheckUnavailable(GpufleetError):
    """plan --check cannot ask the account: the Pulumi CLI is missing (usage, as MissingTool)."""

    exit_code = ExitCode.USAGE


def check_stack(name: str, root: Path | None = None, backend: str | None = None) -> list[dict]:
    """Online: `pulumi preview` of the stack against its account, so the offer check and every
    validator ask the cloud before anything exists; the checks' outcomes, or the refusal.

    The preview runs on a scratch stack, `<name>-check-<random>`, made for it and removed
    after: never on the cluster's own stack, whose config (a live cluster's) it would rewrite,
    and leaving no empty stack for `sweep` to find."""
    import secrets

    from gpufleet.components import stackconfig
    from gpufleet.core.errors import MissingTool
    from gpufleet.provision import pulumi as pp

    try:
        pp.find_pulumi()
    except MissingTool:
        raise CheckUnavailable(
            "plan --check asks the cloud through `pulumi preview`, and the Pulumi CLI is not "
            "installed",
            hint=CHECK_FIX,
        ) from None
    spec = stackconfig.spec_from_stack(name, root)
    pp._import_sdk(spec.cloud)
    outcomes: list[dict] = []
    refused: list[GpufleetError] = []

    def program() -> None:
        try:
            fleet = stackconfig.build(spec)
        except GpufleetError as e:  # a validator's or the offer check's refusal, as itself
            refused.append(e)
            raise
        outcomes.extend(c.as_dict() for c in fleet.checks)

    stack = pp._stack(f"{spec.name}-check-{secrets.token_hex(4)}", backend, program)
    try:
        pp.set_provider_config(stack, spec)
        stack.preview(color="never")
    except Exception as e:
        if refused:
            raise refused[0] from e
        raise GpufleetError(
            f"pulumi preview of {name} failed: {str(e).strip()[-1500:]}", hint=CHECK_FIX
        ) from e
    finally:
        # A preview creates nothing, so no force: were the stack somehow not empty, it stays.
        # Should removal fail, `sweep` removes the empty stack (no record of its cluster).
        with contextlib.suppress(Exception):
            stack.workspace.remove_stack(stack.name)
    return outcomes


def plan_bake(name: str, root: Path | None = None) -> dict[str, Any]:
    """The plan document of stack `name`'s image bake (`image bake --plan --json`): the
    builder's resources with their inputs, as plan_stack shows a cluster's, and its expiry."""
    from gpufleet.components import stackconfig
    from gpufleet.components.errors import cloud_sdk

    config = stackconfig.stack_config(name, root)
    spec = stackconfig.spec_from_config(config, stack=name)
    with cloud_sdk(spec.cloud):
        from gpufleet.components.preview import evaluate

        return _plan_bake(name, spec, config, evaluate)


def _plan_bake(
    name: str, spec: ClusterSpec, config: dict[str, Any], evaluate: Any
) -> dict[str, Any]:
    from gpufleet.components import catalog, stackconfig
    from gpufleet.components.bake import BAKE_HOURS, bake_exports, declare_bake
    from gpufleet.components.errors import CatalogError

    built: list[Any] = []

    def program() -> dict[str, Any]:
        built.append(declare_bake(spec))
        return bake_exports(built[0])

    plan = evaluate(program, config=stackconfig.pulumi_config(config), stack=f"{name}-image")
    bake = built[0]
    try:
        price = catalog.lookup(spec.cloud, bake.builder_type).price_per_hour
    except CatalogError:
        price = None
    return {
        "stack": name,
        "bake_stack": f"{spec.name}-image",
        "cloud": spec.cloud,
        "builder_type": bake.builder_type,
        "price_per_hour": price,
        # Under mocks the first apply has not happened: outputs.expires_at counts from epoch 0.
        "expiry": f"{BAKE_HOURS * 60} min after the first apply, then fixed (stack state)",
        "backstop": bake.backstop,
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "summary": _summary(canonical(masked(r.inputs))),
                "inputs": canonical(masked(r.inputs)),
            }
            for r in sorted(plan.resources, key=lambda r: (r.type, r.name))
        ],
        "outputs": canonical(plan.outputs),
    }
