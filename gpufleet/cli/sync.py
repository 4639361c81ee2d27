"""CLI: sync — mirror a working directory into every node's workdir of a running cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli import options as opt


def sync_(
    name: opt.ClusterName,
    workdir: Annotated[Path, typer.Option(help="directory to mirror")] = Path("."),
    include: Annotated[
        list[str], typer.Option(help="also copy paths matching this (.gitignore-style; repeat)")
    ] = [],  # noqa: B006
    exclude: Annotated[
        list[str], typer.Option(help="never copy paths matching this (repeat)")
    ] = [],  # noqa: B006
    method: Annotated[
        str,
        typer.Option(
            "--sync-method",
            help="auto | rsync | paramiko",
            autocompletion=completers.choices(completers.SYNC_METHODS),
        ),
    ] = "auto",
    as_json: Annotated[
        bool, typer.Option("--json", help="print what was copied (sync.schema.json)")
    ] = False,
) -> None:
    """Mirror WORKDIR into each node's workdir: this machine uploads to the head only, the
    head copies to the workers; files the directory no longer has are removed there."""
    from gpufleet.cli import run_sync
    from gpufleet.core import state

    if method not in ("auto", "rsync", "paramiko"):
        raise typer.BadParameter("use auto, rsync or paramiko", param_hint="--sync-method")
    if not workdir.is_dir():
        raise typer.BadParameter(f"{workdir} is not a directory", param_hint="--workdir")
    info = state.load(name)
    run_sync(info, str(workdir), include=include, exclude=exclude, method=method, as_json=as_json)


def register(app: typer.Typer) -> None:
    app.command("sync")(sync_)
