"""CLI: the options of `gpufleet` itself: --version, --debug."""

from __future__ import annotations

from typing import Annotated

import typer


def _version(value: bool) -> None:
    if value:
        from gpufleet import __version__

        typer.echo(f"gpufleet {__version__}")
        raise typer.Exit(0)


def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option("--debug", help="print the traceback of an error (also: GPUFLEET_DEBUG=1)"),
    ] = False,
) -> None:
    """Multi-node GPU clusters as code: create, run distributed jobs, tear down."""
