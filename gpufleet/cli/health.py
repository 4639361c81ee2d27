"""CLI: health — the node check on every node, and optionally the fabric all-reduce probe."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli.common import console, node_printer, print_json, progress


def health(
    name: Annotated[str, typer.Argument(help="cluster name")],
    fabric: Annotated[
        bool, typer.Option("--fabric", help="also run the all-reduce probe across the cluster")
    ] = False,
    sizes: Annotated[
        str | None, typer.Option(help="probe message sizes in bytes, comma-separated")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON document")] = False,
) -> None:
    """Check every node (GPUs, driver, ECC, NVLink, fabric, runtime); exit 5 if any fails."""
    from gpufleet import health as h
    from gpufleet import state
    from gpufleet.remote import Group

    info = state.load(name)
    with Group(info) as group:
        group.wait_ready(60, refused_fails=True, progress=progress)
        reports = h.check_cluster(info, group)
        probe = None
        if fabric:
            progress(f"all-reduce probe across {len(info.nodes)} nodes")
            probe = h.fabric_probe(info, group, sizes, stream=None if as_json else node_printer())
    ok = all(r.ok for r in reports.values())
    if as_json:
        print_json(
            {
                "cluster": name,
                "ok": ok,
                "nodes": {
                    n: {"ok": r.ok, "error": r.error, "checks": r.checks}
                    for n, r in reports.items()
                },
                "fabric_probe": probe,
            }
        )
    else:
        _print(name, reports, probe)
    if not ok:
        raise typer.Exit(h.UnhealthyCluster.exit_code)


def _print(name: str, reports: dict, probe: dict | None) -> None:
    from rich.table import Table

    out = console()
    table = Table(title=f"health of {name}")
    for col in ("node", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for node, r in reports.items():
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
