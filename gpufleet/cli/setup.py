"""CLI: setup pulumi — install the pinned Pulumi CLI under $GPUFLEET_HOME (no root, no curl)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.provision.pulumicli import PINNED  # stdlib and state only: --help stays fast

setup_app = typer.Typer(help="Install what cloud runs need.", no_args_is_help=True)


@setup_app.command(
    help=f"Install the Pulumi CLI gpufleet is tested with ({PINNED}) into "
    "$GPUFLEET_HOME/pulumi-cli."
)
def pulumi(
    yes: Annotated[bool, typer.Option("--yes", "-y", help="install without asking (CI)")] = False,
) -> None:
    import sys

    from gpufleet.cli.common import ask, progress
    from gpufleet.provision.pulumicli import install, install_root

    root = install_root()
    if not yes and sys.stdin.isatty() and not ask(f"Install Pulumi CLI {PINNED} into {root}?"):
        from gpufleet.components.exitcodes import ExitCode

        raise typer.Exit(ExitCode.DECLINED)
    path = install(progress)
    typer.echo(path)


def register(app: typer.Typer) -> None:
    app.add_typer(setup_app, name="setup")
