"""CLI: attach, adopting a fleet made with plain `pulumi up` from its stack's outputs."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.common import print_json, progress


def attach(
    name: Annotated[str, typer.Argument(help="the cluster's name here; the stack's by default")],
    outputs: Annotated[
        str | None,
        typer.Option(
            "--outputs",
            help="FILE (- for stdin) holding `pulumi stack output --json --show-secrets` "
            "instead of asking Pulumi",
        ),
    ] = None,
    stack: Annotated[
        str | None,
        typer.Option("--stack", "-s", help="the stack to read (default: NAME; org/project/stack)"),
    ] = None,
    cwd: Annotated[
        str | None, typer.Option("--cwd", help="the stack's project folder (default: here)")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the cluster document (cluster.schema.json)")
    ] = False,
) -> None:
    """Adopt a fleet made with plain `pulumi up`, so exec, run, ssh and ssh-config work on it.

    Reads the stack's outputs (the Pulumi CLI, in --cwd, logged in to its backend), or the
    JSON of `pulumi stack output --json --show-secrets` given with --outputs. Saves its key
    and host keys; nodes that made their own host keys are pinned from the cloud first, as
    `up` does. `gpufleet down NAME` then forgets it and leaves the stack: `pulumi destroy`
    removes its nodes.
    """
    import os

    from gpufleet.clusters import attach as adopt

    if outputs is not None and (stack or cwd):
        raise typer.BadParameter(
            "--outputs reads no stack: drop --stack/--cwd", param_hint="--outputs"
        )
    if outputs is not None:
        data = adopt.read_outputs_file(outputs)
        source = {"outputs": "stdin" if outputs == "-" else os.path.abspath(outputs)}
    else:
        stack = stack or name
        data = adopt.read_stack_outputs(stack, cwd)
        source = {"stack": stack, "cwd": os.path.abspath(cwd or os.getcwd())}
    info = adopt.attach(name, data, progress, source=source)
    if as_json:
        from gpufleet.cli import documents

        doc = documents.cluster(info, {n.name: "in stack" for n in info.nodes}, state="running")
        print_json(documents.envelope("cluster", **doc))
        return
    for n in info.nodes:
        typer.echo(
            f"{info.name}-{n.name}  {n.public_ip or '-':<15}  {n.private_ip:<15}  {n.gpus} GPUs"
        )
    progress(
        f"next: `gpufleet exec {info.name} -- hostname`; `gpufleet down {info.name}` forgets it "
        f"(the stack stays: {adopt.destroy_hint(info)} removes its nodes)"
    )


def register(app: typer.Typer) -> None:
    app.command()(attach)
