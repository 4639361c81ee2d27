"""CLI: runs, logs — past and running jobs, from $GPUFLEET_HOME/runs/."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli.common import console, new_table, print_json, when

# a recovery's steps, in order: (its record's key, the column); each step's time is said as
# the seconds since the step before it (the first: since the loss, when it is known)
STEPS = (
    ("detected_at", "detect"),
    ("provisioned_at", "provision"),
    ("synced_at", "sync"),
    ("restarted_at", "restart"),
)


def runs(
    run_id: Annotated[
        str | None,
        typer.Argument(
            help="only this run (id or a unique prefix), with its recovery timeline",
            autocompletion=completers.run_ids,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the run list (run-list.schema.json)")
    ] = False,
) -> None:
    """List runs: id, status, start, end, exit code, nodes, cluster, restarts, estimated cost.

    restarts: the run's recoveries (`run --recover`); `runs RUN_ID` shows their timeline.
    """
    from gpufleet.jobs import runs as r

    found = r.all_runs() if run_id is None else [r.load(run_id)]
    if as_json:
        from gpufleet.cli.documents import run_list

        print_json(run_list(found))
        return
    if not found:
        typer.echo("no runs yet (`gpufleet run` records each one)")
        return
    columns = ("run", "status", "started", "ended", "exit", "nodes", "cluster", "restarts", "cost")
    table = new_table(columns)
    for x in found:
        cost = "-" if x.cost_usd is None else f"${x.cost_usd:.2f}"
        exit_code = "-" if x.exit_code is None else str(x.exit_code)
        table.add_row(x.id, x.status, when(x.started_at, seconds=True),
                     when(x.ended_at, seconds=True), exit_code, str(x.nodes), x.cluster,
                     str(x.restarts), cost)  # fmt: skip
    console().print(table)
    if run_id is not None:
        for line in timeline(found[0].recoveries):
            typer.echo(line)


def timeline(recoveries: list[dict]) -> list[str]:
    """One run's recoveries, one line each: what was lost and why, what was done, and how
    long each step took (seconds since the step before; "-" for a step that did not happen)."""
    if not recoveries:
        return ["no recoveries"]
    lines = [f"{len(recoveries)} recover{'y' if len(recoveries) == 1 else 'ies'}:"]
    for rec in recoveries:
        nodes = ", ".join(rec.get("nodes") or []) or "-"
        steps, before = [], rec.get("lost_at")
        for key, label in STEPS:
            at = rec.get(key)
            took = "-" if at is None or before is None else f"+{max(0.0, at - before):.1f}s"
            steps.append(f"{label} {took}")
            before = at if at is not None else before
        first, last = rec.get("lost_at") or rec.get("detected_at"), rec.get("restarted_at")
        total = f", {last - first:.1f}s in all" if first is not None and last is not None else ""
        lines.append(
            f"  #{rec.get('attempt')} {rec.get('cause')} ({rec.get('reason') or '-'}): "
            f"{rec.get('mode')} {nodes}; {', '.join(steps)}{total}"
        )
    return lines


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
