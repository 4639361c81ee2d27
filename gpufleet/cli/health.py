"""CLI: health — the node check on every node, and optionally the fabric all-reduce probe."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import options as opt
from gpufleet.cli.common import console, node_index, node_printer, print_json, progress


def health(
    name: opt.ClusterName,
    fabric: Annotated[
        bool, typer.Option("--fabric", help="also run the all-reduce probe across the cluster")
    ] = False,
    sizes: Annotated[
        str | None,
        typer.Option(help="probe message sizes, comma-separated: 65536,1M,256MiB (with --fabric)"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the health document (health.schema.json)")
    ] = False,
) -> None:
    """Check every node (GPUs, driver, ECC, NVLink, fabric, runtime); exit 5 if any fails.

    Exit codes: 0 healthy, 5 a node failed its checks, 4 a node did not answer SSH,
    2 bad input (unknown cluster, bad --sizes).
    """
    from gpufleet.cli import documents
    from gpufleet.core import state
    from gpufleet.jobs import health as h
    from gpufleet.jobs import validate

    if sizes is not None and not fabric:
        raise typer.BadParameter("--sizes applies to the probe: add --fabric", param_hint="--sizes")
    sizes = validate.sizes(sizes)
    info = state.load(name)
    stream = None if as_json else _without_protocol(node_printer(), h.PROBE_MARK)
    reports, probe = h.check(info, progress, stream, fabric=fabric, sizes=sizes)
    ok = all(r.ok for r in reports.values())
    if as_json:
        nodes = [
            {"name": n, "ok": r.ok, "error": r.error, "checks": r.checks}
            for n, r in sorted(reports.items(), key=lambda kv: node_index(kv[0]))
        ]
        print_json(
            documents.envelope("health", cluster=name, ok=ok, nodes=nodes, fabric_probe=probe)
        )
    else:
        _print(name, reports, probe)
    if not ok:
        raise typer.Exit(h.UnhealthyCluster.exit_code)


def _without_protocol(stream, mark: str):
    """The probe's machine-readable report line is for gpufleet, not for the screen."""

    def emit(node: str, line: str, is_err: bool) -> None:
        if not line.startswith(mark):
            stream(node, line, is_err)

    return emit


def _print(name: str, reports: dict, probe: dict | None) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"health of {name}")
    for col in ("node", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for node, r in sorted(reports.items(), key=lambda kv: node_index(kv[0])):
        verdict = "[green]pass[/green]" if r.ok else "[red]FAIL[/red]"
        table.add_row(node, verdict, "; ".join(r.reasons))
    out.print(table)
    if probe:
        t = Table(title=f"all-reduce ({probe.get('backend')}, {probe.get('world_size')} ranks)")
        for col in ("bytes", "time_us", "algbw GB/s", "busbw GB/s"):
            t.add_column(col, justify="right")
        for row in probe.get("results", []):
            t.add_row(
                str(row.get("bytes")),
                f"{row.get('time_us', 0):.1f}",
                f"{row.get('algbw_gbps', 0):.3f}",
                f"{row.get('busbw_gbps', 0):.3f}",
            )
        out.print(t)
        if probe.get("verdict"):
            out.print(probe["verdict"])
        base = probe.get("baseline_busbw_gbps")
        if base:
            peak = probe.get("peak_busbw_gbps", 0.0)
            out.print(
                f"peak bus bandwidth {peak:.1f} GB/s vs the published {base:.0f} GB/s "
                f"for this type ({100 * peak / base:.0f}%)"
            )


def register(app: typer.Typer) -> None:
    app.command()(health)
