"""Offline plan of a stack: every resource its program registers under mocks, and its $/hour."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def price_estimate(it: Any, nodes: int, spot: bool) -> dict[str, Any]:
    """$/hour of the fleet at the rate it will be billed: spot where the catalog has a spot
    price; otherwise on-demand, said so (for spot, an upper bound rather than an estimate)."""
    if spot and it.spot_price_per_hour:
        basis, per_node, date = "spot", it.spot_price_per_hour, it.spot_price_date
        note = f"spot price of {date} ({it.spot_price_source}); it changes daily"
    else:
        basis, per_node, date = "on-demand", it.price_per_hour, it.price_date
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
        "price_date": date,
        "on_demand_per_node_hour": it.price_per_hour,
        "estimated_usd_per_hour": round(nodes * per_node, 3) if per_node else None,
    }


def plan_stack(name: str, root: Path | None = None) -> dict[str, Any]:
    """The plan document of stack `name` (a stacks/Pulumi.<name>.yaml), with no credentials."""
    from gpufleet.components import stackconfig
    from gpufleet.components.errors import cloud_sdk

    config = stackconfig.stack_config(name, root)
    spec = stackconfig.spec_from_config(config, stack=name)
    with cloud_sdk(spec.cloud):  # the mocks and the component import the cloud's SDK
        from gpufleet.components.preview import evaluate

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
        **price_estimate(it, spec.nodes, spec.spot),
        # Offline: a stand-in's answer or none, said as such (components/offers.py).
        "availability": built[0].availability.as_dict(),
        # The account's facts (components/validators.py): skipped offline, with the reason.
        "checks": [c.as_dict() for c in built[0].checks],
        "resources": [
            {
                "type": r.type,
                "name": r.name,
                "summary": _summary(canonical(r.inputs)),
                "inputs": canonical(r.inputs),
            }
            for r in sorted(plan.resources, key=lambda r: (r.type, r.name))
        ],
        "outputs": canonical(outputs),
    }


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
