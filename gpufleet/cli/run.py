"""CLI: run — a cluster, a distributed job on it, and teardown, in one command."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.common import node_printer, parse_pairs, parse_ttl, progress

LAUNCHERS_HELP = "torchrun (script or -m module) | mpirun (script) | none (shell command)"


def given(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The options among `names` the user typed (not defaults)."""
    return [n for n in names if getattr(ctx.get_parameter_source(n), "name", "") == "COMMANDLINE"]


def run(
    ctx: typer.Context,
    command: Annotated[
        list[str],
        typer.Argument(
            help="after --: SCRIPT [ARGS] or -m MODULE [ARGS] (torchrun, mpirun), "
            "or a shell command (--launcher none)",
            metavar="-- JOB...",
        ),
    ],
    cluster: Annotated[
        str | None,
        typer.Option(help="run on this existing cluster (kept afterwards) instead of creating one"),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", "-n", help="name of the new cluster (default: run-XXXXXX)"),
    ] = None,
    cloud: Annotated[str, typer.Option(help="local | aws | gcp | azure (any case)")] = "local",
    nodes: Annotated[int, typer.Option(help="number of nodes, head included")] = 2,
    instance_type: Annotated[
        str | None,
        typer.Option("--instance-type", "-t", help="GPU instance type (see `gpufleet catalog`)"),
    ] = None,
    region: Annotated[
        str | None, typer.Option(help="cloud region (default: the cloud's; not on local)")
    ] = None,
    zone: Annotated[
        str | None, typer.Option(help="zone within the region (default: the cloud picks)")
    ] = None,
    spot: Annotated[bool, typer.Option(help="spot/preemptible capacity (clouds only)")] = False,
    public_workers: Annotated[
        bool, typer.Option(help="a public address on every node, not only the head")
    ] = False,
    ttl: Annotated[
        str, typer.Option(help="node-side expiry of a created cluster: 30m, 4h, 1h30m")
    ] = "4h",
    ssh_cidr: Annotated[
        list[str], typer.Option(help="CIDR allowed to SSH (repeat; default: your address)")
    ] = [],  # noqa: B006
    launcher: Annotated[str, typer.Option(help=LAUNCHERS_HELP)] = "torchrun",
    nproc_per_node: Annotated[
        int | None, typer.Option(help="ranks per node (default: the node's GPUs, or 1)")
    ] = None,
    master_port: Annotated[
        int | None, typer.Option(help="rendezvous port, 1024-65535 (default: random)")
    ] = None,
    env: Annotated[list[str], typer.Option("--env", "-e", help="KEY=VALUE for every rank")] = [],  # noqa: B006
    workdir: Annotated[
        Path, typer.Option(help="directory copied to every node; the job runs in it")
    ] = Path("."),
    setup: Annotated[str | None, typer.Option(help="shell command run on every node first")] = None,
    keep: Annotated[bool, typer.Option(help="keep the created cluster afterwards")] = False,
    health_gate: Annotated[bool, typer.Option(help="refuse to start on unhealthy nodes")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="create cloud nodes without asking (CI)")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan and the job, create nothing")
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(help="USD cap: refuse to start when the cost at TTL is over it (or unknown)"),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="one run-result document on stdout; node output to stderr"),
    ] = False,
) -> None:
    """Create a cluster (or reuse one), run a distributed job on it, and tear it down.

    Everything is checked before a node is created: the script (or -m module) in --workdir,
    ports, option values, flags that cannot apply. On a cloud the plan summary ($/hour, TTL,
    total at TTL) is shown and confirmed on a terminal (--yes skips it).

    Exits with the job's exit code (the first failing rank's), 2 on bad input, 130 on Ctrl-C,
    143 on SIGTERM.
    """
    from components.spec import ClusterSpec
    from gpufleet import launch, state, validate
    from gpufleet.cli.cluster import spec_from_flags

    if launcher not in launch.LAUNCHERS:
        raise typer.BadParameter(
            f"use one of {', '.join(launch.LAUNCHERS)}", param_hint="--launcher"
        )
    if not command:
        raise typer.BadParameter("give the job after --, e.g. -- train.py --epochs 1")
    if not workdir.is_dir():
        raise typer.BadParameter(f"{workdir} is not a directory", param_hint="--workdir")
    validate.port(master_port)
    validate.nproc(nproc_per_node)
    validate.job(launcher, list(command), workdir, setup)
    spec: ClusterSpec | None = None
    est = None
    if cluster is not None:
        validate.not_with_cluster(cluster, given(ctx, validate.CREATE_FLAGS + ("ssh_cidr",)))
        state.load(cluster)  # ClusterNotFound before anything runs
    else:
        spec = spec_from_flags(
            name=name or "run-" + secrets.token_hex(3),
            cloud=validate.cloud_name(cloud),
            nodes=nodes,
            instance_type=instance_type,
            region=region,
            zone=zone,
            spot=spot,
            public_workers=public_workers,
            ttl_minutes=parse_ttl(ttl),
            ssh_cidrs=ssh_cidr,
        )
    opts_port = master_port or 29500 + secrets.randbelow(1000)
    if spec is not None:
        from gpufleet.cli import spend

        job_line = " ".join(command)
        est = spend.gate(
            spec,
            yes=yes,
            dry_run=dry_run,
            max_cost=max_cost,
            extra={"json": as_json, "launcher": launcher, "job": job_line},
        )
    elif dry_run:
        typer.echo(f"would run `{' '.join(command)}` ({launcher}) on cluster {cluster}")
        typer.echo("dry run: nothing was started")
        raise typer.Exit(0)
    from gpufleet.errors import GpufleetError
    from gpufleet.job import JobRequest, run_job
    from gpufleet.launch import LaunchOptions

    opts = LaunchOptions(
        launcher=launcher,
        command=list(command),
        nproc_per_node=nproc_per_node,
        master_port=opts_port,
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
    stream = node_printer(to_stderr=True) if as_json else node_printer()
    started_at, t0 = time.time(), time.monotonic()
    code, error = 0, None
    try:
        code = run_job(req, progress, stream)
    except GpufleetError as e:
        code, error = e.exit_code, e
        raise
    except KeyboardInterrupt:
        code = 130
        raise
    finally:
        _finish(req, est, started_at, time.monotonic() - t0, code, error, as_json)
    raise typer.Exit(code)


def _finish(req, est, started_at: float, seconds: float, code: int, error, as_json: bool) -> None:
    """Wall time and estimated cost at the end of a run; --json: the run-result document."""
    from gpufleet import cost
    from gpufleet.cli.common import duration, print_json

    spent = cost.run_cost(est, seconds) if est is not None else None
    if est is not None and est.cloud != "local":
        progress(f"run took {duration(seconds)}, estimated cost {cost.money(spent)}")
    else:
        progress(f"run took {duration(seconds)}")
    if as_json:
        print_json(
            {
                "schema": 1,
                "kind": "run",
                "run_id": req.launch.run_id,
                "cluster": req.cluster or req.spec.name,
                "created": req.cluster is None,
                "cloud": est.cloud if est is not None else None,
                "instance_type": est.instance_type if est is not None else None,
                "launcher": req.launch.launcher,
                "command": req.launch.command,
                "exit_code": code,
                "error": None if error is None else str(error),
                "failed_node": getattr(error, "node", None),
                "started_at": round(started_at, 3),
                "wall_seconds": round(seconds, 3),
                "usd_per_hour": est.usd_per_hour if est is not None else None,
                "estimated_cost_usd": spent,
            }
        )


def register(app: typer.Typer) -> None:
    app.command()(run)
