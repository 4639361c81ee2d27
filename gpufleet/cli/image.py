"""CLI: image — the exact cloud-init a stack's node boots with, and baking a ready image."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import completers

image_app = typer.Typer(help="The node image: render its cloud-init, bake a reusable image.")


@image_app.command()
def render(
    stack: Annotated[
        str,
        typer.Option(
            help="stack name: stacks/Pulumi.<stack>.yaml", autocompletion=completers.stacks
        ),
    ],
    node: Annotated[int, typer.Option(help="node index (0 = head)")] = 0,
    stacks_dir: Annotated[Path | None, typer.Option(help="folder with the stack files")] = None,
    expires_at: Annotated[
        int | None, typer.Option(help="expiry epoch seconds (default: now + the stack's TTL)")
    ] = None,
) -> None:
    """Print node K's #cloud-config; keys and deploy-time values appear as placeholders."""
    import sys

    from gpufleet.cli.common import progress
    from gpufleet.components.bootstrap import placeholder_context, render_cloud_init
    from gpufleet.components.errors import SpecError
    from gpufleet.components.stackconfig import spec_from_stack, stack_file

    spec = spec_from_stack(stack, stacks_dir)
    progress(f"stack {stack}: {stack_file(stack, stacks_dir)}")
    if not 0 <= node < spec.nodes:
        raise SpecError("node", f"{node} is not a node of {stack}", f"use 0..{spec.nodes - 1}")
    when = expires_at if expires_at is not None else spec.expiry()
    sys.stdout.write(render_cloud_init(placeholder_context(spec, node, when)))


@image_app.command()
def bake(
    stack: Annotated[
        str,
        typer.Option(
            help="stack whose cloud, region and type to bake for", autocompletion=completers.stacks
        ),
    ],
    stacks_dir: Annotated[Path | None, typer.Option(help="folder with the stack files")] = None,
    plan: Annotated[
        bool, typer.Option("--plan", help="only show what the bake registers (offline, mocks)")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="with --plan: the whole plan, inputs included (bake-plan.schema.json)"
        ),
    ] = False,
    backend: Annotated[str | None, typer.Option(help="Pulumi state backend URL")] = None,
) -> None:
    """Boot a builder with the recipe and capture an image a stack can name as `image`."""
    from gpufleet.cli.common import print_json, progress
    from gpufleet.components.stackconfig import spec_from_stack, stack_file

    spec = spec_from_stack(stack, stacks_dir)
    progress(f"stack {stack}: {stack_file(stack, stacks_dir)}")
    if plan:
        from gpufleet.cli.documents import envelope
        from gpufleet.clusters.plan import plan_bake

        doc = plan_bake(stack, stacks_dir)
        if as_json:
            print_json(envelope("bake-plan", **doc))
        else:
            _print_plan(doc)
        return
    if as_json:
        from gpufleet.components.exitcodes import ExitCode
        from gpufleet.core.errors import GpufleetError

        raise GpufleetError("--json is for --plan", hint="add --plan", exit_code=ExitCode.USAGE)
    from gpufleet.core import state
    from gpufleet.provision.pulumi import bake as run_bake

    # Held while the bake runs: `sweep` leaves a bake stack alone only while its name is
    # locked, and destroys one whose `image bake` died (gpufleet/clusters/ops.py stale_stacks).
    with state.lock(f"{spec.name}-image"):
        image_id = run_bake(spec, progress, backend)
    typer.echo(image_id)
    progress(f"set `image: {image_id}` in the stack's gpufleet:cluster to boot nodes ready")


def _print_plan(doc: dict) -> None:
    from gpufleet.cli.common import print_resources

    title = f"bake stack {doc['bake_stack']}: {len(doc['resources'])} resources"
    out = print_resources(title, doc["resources"])
    price = f"${doc['price_per_hour']}/h" if doc["price_per_hour"] else "price unknown"
    out.print(f"builder {doc['builder_type']} ({price}), removed after the capture")
    out.print(f"builder expiry: {doc['expiry']}; then {doc['backstop']}")


def register(app: typer.Typer) -> None:
    app.add_typer(image_app, name="image")
