"""CLI: runs, logs — past and running jobs, from $GPUFLEET_HOME/runs/."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli.common import console, new_table, print_json, when


def runs(
    as_json: Annotated[
        bool, typer.Option("--json", help="print the run list (run-list.schema.json)")
    ] = False,
) -> None:
    """List runs: id, status, start, end, exit code, nodes, cluster, estimated cost."""
    from gpufleet.jobs import runs as r

    found = r.all_runs()
    if as_json:
        from gpufleet.cli.documents import run_list

        print_json(run_list(found))
        return
    if not found:
        typer.echo("no runs yet (`gpufleet run` records each one)")
        return
    table = new_table(("run", "status", "started", "ended", "exit", "nodes", "cluster", "cost"))
    for x in found:
        cost = "-" if x.cost_usd is None else f"${x.cost_usd:.2f}"
        exit_code = "-" if x.exit_code is None else str(x.exit_code)
        table.add_row(x.id, x.status, when(x.started_at, seconds=True),
                     when(x.ended_at, seconds=True), exit_code, str(x.nodes), x.cluster,
                     cost)  # fmt: skip
    console().print(table)


def logs(
    run_id: Annotated[
        str, typer.Argument(help="run id (or a unique prefix)", autocompletion=completers.run_ids)
    ],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="keep printing until the run ends")
    ] = False,
    node: Annotated[str | None, typer.Option(help="only this node's lines, e.g. node-1")] = None,
) -> None:
    """Print a past or running job's output, `[node-K]` prefixed, as `run` printed it."""
    from gpufleet.jobs import runs as r

    if follow:
        r.follow(run_id, typer.echo, node)
        return
    for line in r.read_log(run_id, node):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command()(runs)
    app.command()(logs)
