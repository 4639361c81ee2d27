"""CLI: run — a cluster, a distributed job on it, and teardown, in one command."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.common import node_printer, parse_pairs, parse_ttl, progress


def run(
    command: Annotated[list[str], typer.Argument(help="after --: script [args] (torchrun) or CMD")],
    cluster: Annotated[
        str | None, typer.Option(help="reuse this cluster (kept afterwards)")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="name of the new cluster")
    ] = None,
    cloud: Annotated[str, typer.Option(help="local | vm | aws | gcp | azure")] = "local",
    nodes: Annotated[int, typer.Option(help="number of nodes")] = 2,
    instance_type: Annotated[str | None, typer.Option("--instance-type", "-t")] = None,
    region: Annotated[str | None, typer.Option()] = None,
    zone: Annotated[str | None, typer.Option()] = None,
    spot: Annotated[bool, typer.Option()] = False,
    public_workers: Annotated[
        bool, typer.Option(help="a public address on every node, not only the head")
    ] = False,
    ttl: Annotated[str, typer.Option(help="node-side expiry of a created cluster")] = "4h",
    ssh_cidr: Annotated[list[str], typer.Option(help="CIDR allowed to SSH (repeat)")] = [],  # noqa: B006
    launcher: Annotated[str, typer.Option(help="torchrun | none | mpirun")] = "torchrun",
    nproc_per_node: Annotated[
        int | None, typer.Option(help="ranks per node (default: GPUs or 1)")
    ] = None,
    master_port: Annotated[
        int | None, typer.Option(help="rendezvous port (default: random)")
    ] = None,
    env: Annotated[list[str], typer.Option("--env", "-e", help="KEY=VALUE for every rank")] = [],  # noqa: B006
    workdir: Annotated[Path, typer.Option(help="directory copied to every node")] = Path("."),
    setup: Annotated[str | None, typer.Option(help="shell command run on every node first")] = None,
    keep: Annotated[bool, typer.Option(help="keep the created cluster afterwards")] = False,
    health_gate: Annotated[bool, typer.Option(help="refuse to start on unhealthy nodes")] = False,
) -> None:
    """Create a cluster (or reuse one), run a distributed job on it, and tear it down.

    Exits with the job's exit code (the first failing rank's), 130 on Ctrl-C, 143 on SIGTERM.
    """
    from gpufleet.cli.cluster import spec_from_flags
    from gpufleet.job import JobRequest, run_job
    from gpufleet.launch import LaunchOptions

    if launcher not in ("torchrun", "none", "mpirun"):
        raise typer.BadParameter("use torchrun, none or mpirun", param_hint="--launcher")
    if not command:
        raise typer.BadParameter("give the job after --, e.g. -- train.py --epochs 1")
    if not workdir.is_dir():
        raise typer.BadParameter(f"{workdir} is not a directory", param_hint="--workdir")
    spec = None
    if cluster is None:
        spec = spec_from_flags(
            name=name or "run-" + secrets.token_hex(3),
            cloud=cloud,
            nodes=nodes,
            instance_type=instance_type,
            region=region,
            zone=zone,
            spot=spot,
            public_workers=public_workers,
            ttl_minutes=parse_ttl(ttl),
            ssh_cidrs=ssh_cidr,
        )
    opts = LaunchOptions(
        launcher=launcher,
        command=list(command),
        nproc_per_node=nproc_per_node,
        master_port=master_port or 29500 + secrets.randbelow(1000),
        run_id=secrets.token_hex(4),
        env=parse_pairs(env, "env"),
    )
    gate = None
    if health_gate:
        from gpufleet.health import gate_hook

        gate = gate_hook
    req = JobRequest(
        launch=opts,
        workdir=workdir.resolve(),
        spec=spec,
        cluster=cluster,
        setup=setup,
        keep=keep,
        health_gate=gate,
    )
    raise typer.Exit(run_job(req, progress, node_printer()))


def register(app: typer.Typer) -> None:
    app.command()(run)
