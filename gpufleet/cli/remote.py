"""CLI: exec, hostfile, ssh, ssh-config."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli import options as opt


def exec_(
    name: opt.ClusterName,
    command: Annotated[list[str], typer.Argument(help="command, after --")],
    node: Annotated[
        list[str],
        typer.Option("--node", help="only these nodes (repeat)", autocompletion=completers.nodes),
    ] = [],  # noqa: B006
    timeout: Annotated[
        float | None, typer.Option(help="seconds before the command is killed")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="one document, each node's exit code and output (exec.schema.json)"
        ),
    ] = False,
    tree: Annotated[
        bool | None,
        typer.Option(
            "--tree/--no-tree",
            help="reach the head only; it runs the fan-out to workers (default: from "
            "GPUFLEET_TREE_FROM nodes on when set and no holder is warm, unless --timeout or "
            "--image) / reach every node from here",
            show_default=False,
        ),
    ] = None,
    image: opt.Image = None,
    runtime: opt.Runtime = None,
    mount: opt.Mounts = [],  # noqa: B006
) -> None:
    """Run a command on every node at once; output lines are prefixed with [node-K].

    Exits 1 when the command failed on a node (each node's own code is printed, and in
    --json), 4 when a node did not answer, 124 when --timeout ran out.
    """
    from gpufleet.cli import container as ctr
    from gpufleet.cli.exec import run_exec
    from gpufleet.core import state
    from gpufleet.jobs.containerhost import check_where
    from gpufleet.jobs.exec import refuse_tree

    info = state.load(name)
    container = ctr.spec(image, runtime, mount)
    refuse_tree(tree, container)
    check_where(info.cloud, container)
    code = run_exec(info, command, node, timeout, as_json, tree, container)
    if code:
        raise typer.Exit(code)


def hostfile(
    name: opt.ClusterName,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="openmpi|mpich|deepspeed|plain|env",
            autocompletion=completers.choices(completers.HOSTFILE_FORMATS),
        ),
    ] = "openmpi",
    aliases: Annotated[
        bool,
        typer.Option(
            "--aliases", help="hosts as <cluster>-node-K, which the cluster's ssh config resolves"
        ),
    ] = False,
) -> None:
    """Print a hostfile for the cluster, head first: private addresses (or --aliases),
    slots = GPUs (at least 1); --format env prints shell variables instead."""
    from gpufleet.core import state
    from gpufleet.jobs import hostfile as hf

    sys.stdout.write(hf.render(state.load(name), fmt, aliases=aliases))


def ssh(
    name: opt.ClusterName,
    node: Annotated[
        str, typer.Argument(help="node name or index", autocompletion=completers.nodes)
    ] = "node-0",
    command: Annotated[
        list[str] | None, typer.Argument(help="command to run instead of a shell")
    ] = None,
) -> None:
    """Open an SSH session to one node (OpenSSH, pinned host key)."""
    import os
    import shutil

    from gpufleet.core import state
    from gpufleet.core.errors import MissingTool

    info = state.load(name)
    n = info.node(node)
    ssh_bin = shutil.which("ssh")
    if not ssh_bin:
        raise MissingTool("ssh", "install OpenSSH's client: `sudo apt-get install openssh-client`")
    from gpufleet.remote import sshconfig

    # The cluster's own config (create wrote it; `ssh-config --control-persist` may have
    # added connection reuse): a worker is reached through the head as `ssh -F` does.
    cfg = state.cluster_dir(name) / sshconfig.FILE
    if not cfg.is_file():
        from gpufleet.clusters.ops import write_ssh_config

        cfg = write_ssh_config(info)
    args = ["ssh", "-F", str(cfg), sshconfig.alias(info, n), *(command or [])]
    sys.stdout.flush()
    os.execv(ssh_bin, args)


def ssh_config(
    name: Annotated[
        str | None, typer.Argument(help="cluster name", autocompletion=completers.clusters)
    ] = None,
    include: Annotated[
        bool, typer.Option("--include", help="print the one Include line for ~/.ssh/config")
    ] = False,
    install: Annotated[
        bool,
        typer.Option(
            "--install",
            help="put that Include line first in ~/.ssh/config (creates it; run again: no change)",
        ),
    ] = False,
    uninstall: Annotated[
        bool, typer.Option("--uninstall", help="remove the Include line from ~/.ssh/config")
    ] = False,
    control_persist: Annotated[
        str | None,
        typer.Option(
            help="add ControlMaster auto + ControlPersist (e.g. 10m) here and in the "
            "cluster's included file, so OpenSSH tools reuse connections"
        ),
    ] = None,
) -> None:
    """Print a cluster's OpenSSH config: hosts `<cluster>` (head) and `<cluster>-node-K`.

    Every cluster's config is also kept in $GPUFLEET_HOME/clusters/<name>/ssh_config (removed
    by `down`); `gpufleet ssh-config --install` includes them all at the top of ~/.ssh/config,
    so `ssh t-node-1`, scp, rsync and VS Code see every cluster.
    """
    from gpufleet.core import state
    from gpufleet.remote import sshconfig

    if include or install or uninstall:
        if include + install + uninstall > 1 or name is not None or control_persist:
            raise typer.BadParameter(
                "use --include, --install or --uninstall alone (no cluster name, no other option)"
            )
        line = sshconfig.include_line(state.home())
        if include:
            typer.echo(line)
            return
        from gpufleet.cli.common import progress
        from gpufleet.remote import sshinclude

        progress((sshinclude.install if install else sshinclude.uninstall)(line))
        return
    if name is None:
        raise typer.BadParameter("name a cluster, or pass --include or --install")
    info = state.load(name)
    if control_persist:
        from gpufleet.clusters.ops import write_ssh_config

        write_ssh_config(info, control_persist)
    sys.stdout.write(sshconfig.render(info, control_persist=control_persist))


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_)
    app.command()(hostfile)
    app.command()(ssh)
    app.command("ssh-config")(ssh_config)
