"""CLI: completion — the shell completion script for bash, zsh or fish."""

from __future__ import annotations

from typing import Annotated

import typer

from gpufleet.cli import completers

SHELLS = ("bash", "zsh", "fish")
INSTALL = {
    "bash": 'eval "$(gpufleet completion bash)"   # in ~/.bashrc',
    "zsh": 'eval "$(gpufleet completion zsh)"    # in ~/.zshrc, after compinit',
    "fish": "gpufleet completion fish > ~/.config/fish/completions/gpufleet.fish",
}


def completion(
    shell: Annotated[
        str,
        typer.Argument(
            help="bash | zsh | fish",
            metavar="SHELL",
            autocompletion=completers.choices(SHELLS),
        ),
    ],
) -> None:
    """Print the completion script for a shell: commands, options and their values (clusters,
    nodes, run ids, clouds, launchers, stacks, instance types).

    bash: eval "$(gpufleet completion bash)" in ~/.bashrc; zsh: the same in ~/.zshrc;
    fish: gpufleet completion fish > ~/.config/fish/completions/gpufleet.fish
    """
    from gpufleet.cli import COMPLETE_VAR

    shell = shell.lower()
    if shell not in SHELLS:
        from gpufleet.components.errors import SpecError

        raise SpecError("shell", f"{shell!r} is not supported", f"use one of {', '.join(SHELLS)}")
    # typer's scripts, named for gpufleet: they call back `gpufleet` with COMPLETE_VAR set
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="gpufleet", complete_var=COMPLETE_VAR, shell=shell))


def register(app: typer.Typer) -> None:
    app.command()(completion)
