"""CLI: run — a cluster, a distributed job on it, and teardown, in one command."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli import options as opt
from gpufleet.cli.common import (
    node_printer,
    parse_duration,
    parse_pairs,
    parse_ttl,
    print_json,
    progress,
)
from gpufleet.provision import DEFAULT_CLOUD

LAUNCHERS_HELP = (
    "torchrun (script or -m module) | mpirun | deepspeed (script) | none (shell command)"
)


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
        typer.Option(
            help="run on this existing cluster (kept afterwards) instead of creating one",
            autocompletion=completers.clusters,
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", "-n", help="name of the new cluster (default: run-XXXXXX)"),
    ] = None,
    cloud: opt.Cloud = DEFAULT_CLOUD,
    nodes: opt.Nodes = None,
    instance_type: opt.InstanceType = None,
    region: opt.Region = None,
    zone: opt.Zone = None,
    spot: opt.Spot = False,
    public_workers: opt.PublicWorkers = False,
    no_policy: opt.NoPolicy = False,
    ttl: Annotated[
        str,
        typer.Option(
            "--max-duration",
            "--ttl",
            help="hard expiry of a created cluster; while run lives it also renews a "
            "lease, so its nodes go a few minutes after run dies",
        ),
    ] = "24h",
    ssh_cidr: Annotated[list[str], typer.Option(help="CIDR allowed to SSH (repeat)")] = [],  # noqa: B006
    launcher: Annotated[
        str,
        typer.Option(help=LAUNCHERS_HELP, autocompletion=completers.choices(completers.LAUNCHERS)),
    ] = "torchrun",
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
    include: Annotated[
        list[str], typer.Option(help="also copy paths matching this (.gitignore-style; repeat)")
    ] = [],  # noqa: B006
    exclude: Annotated[
        list[str], typer.Option(help="never copy paths matching this (repeat)")
    ] = [],  # noqa: B006
    setup: Annotated[str | None, typer.Option(help="shell command run on every node first")] = None,
    image: opt.Image = None,
    runtime: opt.Runtime = None,
    mount: opt.Mounts = [],  # noqa: B006
    registry_id: opt.RegistryId = None,
    recover: opt.Recover = None,
    recover_mode: opt.RecoverMode = None,
    recover_on_exit: opt.RecoverOnExit = [],  # noqa: B006
    checkpoint_dir: opt.CheckpointDir = None,
    elastic: opt.Elastic = None,
    max_restarts: opt.MaxRestarts = None,
    keep: Annotated[bool, typer.Option(help="keep the created cluster afterwards")] = False,
    health_gate: Annotated[bool, typer.Option(help="refuse to start on unhealthy nodes")] = False,
    fail_fast: Annotated[
        bool, typer.Option(help="stop every node when the first one fails (default)")
    ] = True,
    hosts: opt.Hosts = None,
    inventory: opt.Inventory = None,
    ssh_user: opt.SshUser = None,
    ssh_key: opt.SshKey = None,
    accept_host_keys: opt.AcceptHostKeys = False,
    max_cost: Annotated[
        float | None,
        typer.Option(help="USD: refuse to start if the nodes' price for the whole TTL exceeds it"),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(help="stop the whole run after this long (e.g. 45m, 2h); exit 124"),
    ] = None,
    yes: opt.Yes = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan and the job, create nothing")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="the run result (run.schema.json) on stdout; node output to stderr"
        ),
    ] = False,
) -> None:
    """Create a cluster (or reuse one), run a distributed job on it, and tear it down.

    Everything is checked before a node is created: the script (or -m module) in --workdir,
    ports, option values, flags that cannot apply. On a cloud the plan summary ($/hour, TTL,
    total at TTL) is shown and confirmed on a terminal (--yes skips it).

    Exits 1 when the job fails (the first failing rank's own code is in the message and in
    --json's job_exit_code; the other nodes are stopped unless --no-fail-fast), 5 when a
    node is lost (with --recover N: once N recoveries are spent), 6 when a node reached its
    expiry, 130 on Ctrl-C, 143 on SIGTERM, 129 on SIGHUP (a closed terminal); `gpufleet
    --help` lists every code.

    --recover N: a lost or preempted node (or a rank's --recover-on-exit code) is recovered
    by --recover-mode and the job started again on every node, which resumes from
    $GPUFLEET_CHECKPOINT_DIR; docs/recovery.md.
    """
    from gpufleet.cli import container as ctr
    from gpufleet.cli import recovery as rcv
    from gpufleet.cli.cluster import spec_from_flags
    from gpufleet.jobs.containerhost import check_where
    from gpufleet.jobs.launch import LAUNCHERS, LaunchOptions
    from gpufleet.jobs.run import JobRequest, run_job

    if launcher not in LAUNCHERS:
        raise typer.BadParameter("use " + ", ".join(LAUNCHERS), param_hint="--launcher")
    if cluster is not None and not cluster.strip():
        raise typer.BadParameter("give a cluster name", param_hint="--cluster")
    if not command:
        raise typer.BadParameter("give the job after --, e.g. -- train.py --epochs 1")
    if not workdir.is_dir():
        raise typer.BadParameter(f"{workdir} is not a directory", param_hint="--workdir")
    from gpufleet.core import state
    from gpufleet.jobs import validate
    from gpufleet.provision.ssh import from_flags

    cloud = validate.cloud_name(cloud)
    validate.port(master_port)
    validate.nproc(nproc_per_node)
    validate.job(launcher, list(command), workdir, setup)
    container = ctr.spec(image, runtime, mount, registry_id=registry_id)
    ckpt = rcv.checkpoint_dir(checkpoint_dir)
    existing_nodes = None
    if cluster is not None:
        validate.not_with_cluster(
            cluster, given(ctx, validate.CREATE_FLAGS + ("ssh_cidr", "no_policy"))
        )
        existing = state.load(cluster)  # ClusterNotFound before anything runs
        cloud, existing_nodes = existing.cloud, len(existing.nodes)
    check_where(cloud, container)  # e.g. the sandbox without a working runtime
    recovery = rcv.spec(recover, recover_mode, recover_on_exit, ckpt, cloud)
    if ckpt is None and recovery is None and cluster is not None:
        ckpt = _recorded_checkpoint_dir(cluster)  # the kept cluster's `recovery:` names one
    byo, byo_options = from_flags(cloud, hosts, inventory, ssh_user, ssh_key, accept_host_keys)
    byo_options.update(opt.policy_option(cloud, no_policy))
    count = validate.node_count(nodes, byo.pop("nodes", None))
    elastic_nodes, restarts = rcv.elastic(
        elastic, max_restarts, launcher, count if existing_nodes is None else existing_nodes
    )
    spec = None
    if cluster is None:
        spec = spec_from_flags(
            name="run-" + secrets.token_hex(3) if name is None else name,
            cloud=cloud,
            nodes=count,
            **byo,
            instance_type=instance_type,
            region=region,
            zone=zone,
            spot=spot,
            public_workers=public_workers,
            ttl_minutes=parse_ttl(ttl),
            ssh_cidrs=ssh_cidr,
            container=container,  # known at create time: the nodes pull it at boot
            recovery=recovery,  # recorded: later runs on a kept cluster default to it
        )
    opts = LaunchOptions(
        launcher=launcher,
        command=list(command),
        nproc_per_node=nproc_per_node,
        master_port=master_port or 29500 + secrets.randbelow(1000),
        run_id=secrets.token_hex(4),
        env=parse_pairs(env, "env"),
        checkpoint_dir=ckpt,
        elastic=elastic_nodes,
        max_restarts=restarts,
    )
    timeout_s = _timeout(timeout) if timeout else None
    if spec is not None:
        from gpufleet.cli import spend

        # the plan summary, --dry-run, --max-cost (in the spec's region) and the Y/n question
        spend.gate(
            spec,
            yes=yes,
            dry_run=dry_run,
            max_cost=max_cost,
            extra={
                "json": as_json,
                "launcher": launcher,
                "job": " ".join(command),
                **ctr.shown(container, cloud, creating=True),
                **rcv.shown(recovery, elastic_nodes),
            },
        )
    elif dry_run:
        typer.echo(f"would run `{' '.join(command)}` ({launcher}) on cluster {cluster}")
        shown = {
            **ctr.shown(container, cloud, creating=False),
            **rcv.shown(recovery, elastic_nodes),
        }
        for k, v in shown.items():
            typer.echo(f"  {k:<10} {v}")
        typer.echo("dry run: nothing was started")
        raise typer.Exit(0)
    gate = None
    if health_gate:
        from gpufleet.jobs.health import gate_hook

        gate = gate_hook
    req = JobRequest(
        launch=opts,
        workdir=workdir.resolve(),
        spec=spec,
        cluster=cluster,
        setup=setup,
        keep=keep,
        health_gate=gate,
        fail_fast=fail_fast,
        include=list(include),
        exclude=list(exclude),
        provision_options=byo_options,
        max_cost=max_cost,
        timeout_s=timeout_s,
        container=container,  # None: the cluster's recorded container, if any
        recovery=recovery,  # None: the cluster's recorded spec.recovery, if any
    )
    on_end = None
    if as_json:
        shown_image = container.image if container else _recorded_image(cluster)
        on_end = lambda rec: _print_result(req, rec, shown_image)  # noqa: E731
    printer = node_printer(to_stderr=True) if as_json else node_printer()
    raise typer.Exit(run_job(req, progress, printer, on_end))


def _print_result(req, rec, image: str | None) -> None:
    """The run-result document (run.schema.json), once the record has its end."""
    from gpufleet.cli import documents

    itype = req.spec.instance_type if req.spec is not None else None
    print_json(documents.run(rec, created=req.cluster is None, instance_type=itype, image=image))


def _recorded_image(cluster: str | None) -> str | None:
    """The image a reused cluster's ranks run in without --image (its recorded spec's)."""
    if cluster is None:
        return None
    from gpufleet.core import state

    spec = state.load_spec(cluster)
    return spec.container.image if spec is not None and spec.container else None


def _recorded_checkpoint_dir(cluster: str) -> str | None:
    """The checkpoint folder of a reused cluster's recorded recovery (its spec's), if any."""
    from gpufleet.core import state

    spec = state.load_spec(cluster)
    return spec.recovery.checkpoint_dir if spec is not None and spec.recovery else None


def _timeout(text: str) -> float:
    """--timeout in seconds; zero is refused (it would stop the run before it starts)."""
    from gpufleet.components.errors import SpecError

    seconds = parse_duration(text, "timeout", "90s, 45m or 2h")
    if not seconds:
        raise SpecError("timeout", f"{text!r} is no time", "write it like 90s, 45m or 2h")
    return seconds


def register(app: typer.Typer) -> None:
    app.command()(run)
