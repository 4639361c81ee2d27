"""CLI: plan — review a stack's resources and cost offline, under Pulumi mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli.common import print_json, print_resources


def plan(
    stack: Annotated[
        str,
        typer.Option(
            help="stack name: stacks/Pulumi.<stack>.yaml", autocompletion=completers.stacks
        ),
    ],
    stacks_dir: Annotated[
        Path | None,
        typer.Option(
            help="folder with the stack files (default: ./, ./stacks, then the shipped stacks)"
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="the whole plan, inputs included (plan.schema.json)")
    ] = False,
    against: Annotated[
        Path | None,
        typer.Option(
            help="a saved `plan --json` of this stack: list what re-applying now would create, "
            "update in place, replace (and why) or delete"
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE of gpufleet:cluster (e.g. ttl_minutes=120, image=...): plan the "
            "stack with it and list what re-applying it over the stack as it is would do",
        ),
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="online: `pulumi preview` against the account, so the offer check and the "
            "account's validators ask the cloud (needs the Pulumi CLI and cloud credentials)",
        ),
    ] = False,
) -> None:
    """Every resource a stack would register, and the fleet's $/hour; no credentials needed."""
    from gpufleet.cli.common import progress
    from gpufleet.cli.documents import envelope
    from gpufleet.clusters.plan import changes, check_stack, load_plan, parse_overrides, plan_stack
    from gpufleet.components.stackconfig import stack_file

    sets = parse_overrides(overrides or [])
    if check:
        checks = check_stack(stack, stacks_dir)
    doc = plan_stack(stack, stacks_dir, sets)
    progress(f"stack {stack}: {stack_file(stack, stacks_dir)}")
    if check:
        doc["checks"] = checks
    change = ", ".join(overrides or []) or "the stack now"
    compared = None
    if against is not None:
        compared = f"the saved plan {against}"
        doc["changes"] = changes(load_plan(against), doc)
    elif sets:
        compared = "the stack as it is"
        doc["changes"] = changes(plan_stack(stack, stacks_dir), doc)
    if compared:
        doc["compared_with"] = f"{change} over {compared}"
    if as_json:
        print_json(envelope("plan", **doc))
        return
    out = print_resources(f"stack {stack}: {len(doc['resources'])} resources", doc["resources"])
    out.print(
        f"{doc['nodes']} × {doc['instance_type']} ({doc['gpus']} GPUs, fabric {doc['fabric']}"
        f"{', spot' if doc['spot'] else ''}): " + _cost(doc)
    )
    out.print(f"availability: {_availability(doc['availability'])}")
    for c in doc.get("checks", []):
        out.print(f"check {c['status']}: {c['fact']} ({c['api']}): {c['detail']}")
    if compared:
        for line in reapply_lines(doc["changes"], change, compared, doc["nodes"]):
            out.print(line, markup=False, highlight=False)


def reapply_lines(changes: list[dict], change: str, base: str, nodes: int) -> list[str]:
    """What re-applying `change` over `base` does, nodes first: `plan --against/--set` (pure)."""
    from gpufleet.components.replacements import Change

    head = f"re-apply of {change} over {base}:"
    if not changes:
        return [f"{head} no change"]
    lines = [head]
    for action, verb, what in (
        ("replace", "REPLACES", "new machines: local disks and running jobs are lost"),
        (
            "refused",
            "FAILS on",
            "the cloud refuses the change on an existing VM: `pulumi up` stops",
        ),
    ):
        hit = sorted(
            {c["node"] for c in changes if c["node"] is not None and c["action"] == action}
        )
        if hit:
            names = ", ".join(f"node {n}" for n in hit)
            lines.append(f"{change} {verb} {len(hit)} of {nodes} nodes ({names}): {what}")
    if not any(c["node"] is not None and c["action"] in ("replace", "refused") for c in changes):
        lines.append(f"{change} replaces no node")
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for c in changes:
        if c["node"] is not None:
            line = "  " + Change(**{**c, "paths": (), "forcing": ()}).line()
            if c["action"] == "replace" and c.get("order") == "create-then-delete":
                line += "; the new one is created before the old is deleted"
            elif c["action"] == "replace" and c.get("order") == "delete-then-create":
                line += "; the old one is deleted first"
            lines.append(line)
        else:
            grouped.setdefault((c["action"], c["type"], c["reason"]), []).append(c["name"])
    for (action, typ, reason), members in grouped.items():
        text = Change(typ, ", ".join(members), action, reason=reason).line()  # type: ignore[arg-type]
        lines.append("  " + text)
    return lines


def _availability(a: dict) -> str:
    from gpufleet.components.offers import Availability

    return Availability(**a).line()


def _cost(doc: dict) -> str:
    if doc["estimated_usd_per_hour"] is None:
        return "no on-demand price in the catalog"
    basis = "on demand" if doc.get("price_basis", "on-demand") == "on-demand" else "at spot"
    text = (
        f"about ${doc['estimated_usd_per_hour']:.2f}/hour {basis} "
        f"({doc['price_region']}, prices of {doc['price_date']})"
    )
    if doc["spot"] and basis == "on demand":
        text += "; no spot price in the catalog: an upper bound for spot"
    elif basis == "at spot":
        text += f"; {doc['price_note']}"
    return text


def register(app: typer.Typer) -> None:
    app.command()(plan)
