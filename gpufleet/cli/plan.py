"""CLI: plan — review a stack's resources and cost offline, under Pulumi mocks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli.common import console, print_json


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
) -> None:
    """Every resource a stack would register, and the fleet's $/hour; no credentials needed."""
    from gpufleet.cli.common import progress
    from gpufleet.cli.documents import envelope
    from gpufleet.clusters.plan import plan_stack
    from gpufleet.components.stackconfig import stack_file

    doc = plan_stack(stack, stacks_dir)
    progress(f"stack {stack}: {stack_file(stack, stacks_dir)}")
    if as_json:
        print_json(envelope("plan", **doc))
        return
    from rich.table import Table

    table = Table(title=f"stack {stack}: {len(doc['resources'])} resources")
    for col in ("type", "name", "key inputs"):
        table.add_column(col, overflow="fold")
    for r in doc["resources"]:
        table.add_row(r["type"], r["name"], r["summary"])
    out = console()
    out.print(table)
    out.print(
        f"{doc['nodes']} × {doc['instance_type']} ({doc['gpus']} GPUs, fabric {doc['fabric']}"
        f"{', spot' if doc['spot'] else ''}): " + _cost(doc)
    )
    out.print(f"availability: {_availability(doc['availability'])}")
    for c in doc.get("checks", []):
        out.print(f"check {c['status']}: {c['fact']} ({c['api']}): {c['detail']}")


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
    return text


def register(app: typer.Typer) -> None:
    app.command()(plan)
