"""CLI: catalog — GPU instance types of every cloud, with fabric, NIC layout and price."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from gpufleet.cli.common import console, print_json

CLOUDS = ("aws", "gcp", "azure")


def catalog(
    cloud: Annotated[str | None, typer.Option(help="aws | gcp | azure")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU model substring, e.g. H100")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="every field, as JSON")] = False,
) -> None:
    """List GPU instance types: GPUs, memory, fabric, EFA/extra NICs, NVSwitch, $/hour."""
    from components import catalog as cat
    from components.errors import SpecError

    if cloud is not None and cloud not in CLOUDS:
        raise SpecError("cloud", f"{cloud!r} has no catalog", f"use one of {', '.join(CLOUDS)}")
    rows = cat.types(cloud, gpu)
    if as_json:
        print_json([dataclasses.asdict(t) for t in rows])
        return
    from rich.table import Table

    table = Table(title=f"{len(rows)} GPU instance types")
    cols = ("cloud", "type", "GPUs", "GPU", "mem GiB", "vCPU", "RAM GiB", "fabric", "NICs", "$/h")
    for col in cols:
        table.add_column(col, justify="right" if col in ("GPUs", "vCPU", "$/h") else "left")
    for t in rows:
        nics = f"{t.efa_interfaces} EFA" if t.efa_interfaces else ""
        nics = nics or (f"+{t.extra_nics}" if t.extra_nics else "")
        price = f"{t.price_per_hour:.3f}" if t.price_per_hour else "n/a"
        table.add_row(
            t.cloud,
            t.name,
            str(t.gpus),
            t.gpu_model + (" (NVSwitch)" if t.nvswitch else ""),
            f"{t.gpu_memory_gib:g}",
            str(t.vcpus),
            f"{t.ram_gib:g}",
            t.fabric,
            nics,
            price,
        )
    console().print(table)


def register(app: typer.Typer) -> None:
    app.command()(catalog)
