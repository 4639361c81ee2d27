"""CLI: catalog — GPU instance types of every cloud, with fabric, NIC layout and price."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli.common import console, print_json

if TYPE_CHECKING:
    from gpufleet.components.catalog import InstanceType

COLUMNS = (
    "cloud",
    "type",
    "GPUs",
    "GiB/GPU",
    "vCPU",
    "RAM GiB",
    "fabric",
    "NVSwitch",
    "$/h",
    "region",
)
_RIGHT = ("GiB/GPU", "vCPU", "RAM GiB", "$/h")


def network(t: InstanceType) -> str:
    """The fabric column: the fabric and the NICs it needs."""
    if t.efa_interfaces:
        return f"efa x{t.efa_interfaces}"
    if t.extra_nics:
        return f"{t.fabric} +{t.extra_nics} NICs"
    return t.fabric


def row(t: InstanceType) -> tuple[str, ...]:
    """One table row of an instance type, in the order of COLUMNS."""
    return (
        t.cloud,
        t.name,
        f"{t.gpus} x {t.gpu_model}",
        f"{t.gpu_memory_gib:g}",
        str(t.vcpus),
        f"{t.ram_gib:g}",
        network(t),
        "yes" if t.nvswitch else "",
        f"{t.price_per_hour:.3f}" if t.price_per_hour else "n/a",
        t.price_region or "",
    )


def catalog(
    cloud: Annotated[
        str | None,
        typer.Option(
            help=" | ".join(completers.CATALOG_CLOUDS) + " (any case)",
            autocompletion=completers.choices(completers.CATALOG_CLOUDS),
        ),
    ] = None,
    gpu: Annotated[
        str | None, typer.Option(help="GPU model substring, any case: H100, a10g, 80GB")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="every field (catalog.schema.json)")
    ] = False,
) -> None:
    """List GPU instance types: GPUs, memory, vCPU, RAM, fabric and NICs, NVSwitch, $/hour."""
    from gpufleet.components import catalog as cat
    from gpufleet.components.errors import SpecError

    cloud = cloud.strip().lower() if cloud is not None else None
    if cloud is not None and cloud not in cat.CLOUDS:
        clouds = ", ".join(cat.CLOUDS)
        raise SpecError("cloud", f"{cloud!r} has no catalog", f"use one of {clouds}")
    found = cat.types(cloud, gpu)
    if not found:  # a filter that names nothing is a typo (exit 2), in the table and --json alike
        models = sorted({t.gpu_model for t in cat.types(cloud, None)})
        raise SpecError(
            "gpu",
            f"no {cloud + ' ' if cloud else ''}instance type has a GPU matching {gpu!r}",
            "pick a model such as " + ", ".join(models[:8]),
        )
    if as_json:
        from gpufleet.cli.documents import envelope

        print_json(envelope("catalog", instance_types=[t.as_dict() for t in found]))
        return
    from rich.table import Table

    table = Table(title=f"{len(found)} GPU instance types (on-demand Linux $/hour per instance)")
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in _RIGHT else "left", no_wrap=True)
    for t in found:
        table.add_row(*row(t))
    console().print(table)


def register(app: typer.Typer) -> None:
    app.command()(catalog)
