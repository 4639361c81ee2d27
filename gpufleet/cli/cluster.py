"""CLI: up, down, status, list."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli import completers
from gpufleet.cli import options as opt
from gpufleet.cli.common import (
    console,
    new_table,
    parse_pairs,
    parse_ttl,
    print_json,
    progress,
    when,
)
from gpufleet.provision import DEFAULT_CLOUD

if TYPE_CHECKING:
    from gpufleet.clusters.cost import Estimate
    from gpufleet.components.clusterinfo import ClusterInfo


def spec_from_flags(**flags: object):
    """Build and validate the ClusterSpec from CLI flags (only the ones given)."""
    from gpufleet.components.clusterspec import ClusterSpec

    data = {k: v for k, v in flags.items() if v not in (None, [], {})}
    return ClusterSpec.from_input(data)


def _auto_name() -> str:
    import secrets

    return "gf-" + secrets.token_hex(3)


def up(
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="cluster name (default: gf-XXXXXX)")
    ] = None,
    cloud: opt.Cloud = DEFAULT_CLOUD,
    nodes: opt.Nodes = None,
    instance_type: opt.InstanceType = None,
    region: opt.Region = None,
    zone: opt.Zone = None,
    spot: opt.Spot = False,
    public_workers: opt.PublicWorkers = False,
    ttl: Annotated[
        str, typer.Option(help="node-side expiry: 30m, 4h, 1h30m (0: none, local only)")
    ] = "4h",
    ssh_cidr: Annotated[
        list[str], typer.Option(help="CIDR allowed to SSH (repeat; default: your address)")
    ] = [],  # noqa: B006
    tag: Annotated[list[str], typer.Option(help="KEY=VALUE tag (repeat)")] = [],  # noqa: B006
    image: Annotated[str | None, typer.Option(help="image id/name instead of the default")] = None,
    container_image: Annotated[
        str | None,
        typer.Option(
            help="container image later runs default to (`run --image`), pulled by every "
            "node at boot; oci-archive:PATH / docker-archive:PATH: copied at the first run"
        ),
    ] = None,
    runtime: opt.Runtime = None,
    registry_id: opt.RegistryId = None,
    backend: Annotated[str | None, typer.Option(help="Pulumi state backend URL")] = None,
    secrets_provider: Annotated[
        str | None,
        typer.Option(
            help="the stack's secrets provider on a shared backend, e.g. awskms://alias/NAME"
            "?region=R (default: $GPUFLEET_SECRETS_PROVIDER)"
        ),
    ] = None,
    no_policy: opt.NoPolicy = False,
    hosts: opt.Hosts = None,
    inventory: opt.Inventory = None,
    ssh_user: opt.SshUser = None,
    ssh_key: opt.SshKey = None,
    accept_host_keys: opt.AcceptHostKeys = False,
    yes: opt.Yes = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan summary, create nothing")
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(help="USD cap: refuse when the cost at TTL is over it (or unknown)"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the cluster document (cluster.schema.json)")
    ] = False,
) -> None:
    """Create a cluster and wait until every node answers SSH.

    On a cloud, the plan summary ($/hour, TTL, total at TTL) is shown and confirmed first on a
    terminal; --yes skips the question, --dry-run stops after it.
    """
    from gpufleet.cli import container as ctr
    from gpufleet.cli import documents, spend
    from gpufleet.clusters import cost, lifecycle
    from gpufleet.jobs import validate
    from gpufleet.jobs.containerhost import check_where
    from gpufleet.provision.ssh import from_flags

    cloud = validate.cloud_name(cloud)
    byo, byo_options = from_flags(cloud, hosts, inventory, ssh_user, ssh_key, accept_host_keys)
    policy = opt.policy_option(cloud, no_policy)
    count = validate.node_count(nodes, byo.pop("nodes", None))
    container = ctr.spec(
        container_image, runtime, [], flag="--container-image", registry_id=registry_id
    )
    check_where(cloud, container, "--container-image")
    spec = spec_from_flags(
        name=_auto_name() if name is None else name,
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
        tags=parse_pairs(tag, "tag"),
        image=image,
        container=container,
    )
    shown = ctr.shown(container, cloud, creating=True)
    est = spend.gate(
        spec, yes=yes, dry_run=dry_run, max_cost=max_cost, extra={"json": as_json, **shown}
    )
    options: dict[str, object] = {"backend": backend} if backend else dict(byo_options)
    if secrets_provider:
        options["secrets_provider"] = secrets_provider
    options.update(policy)
    info = lifecycle.up(spec, progress, max_cost=max_cost, **options)
    if as_json:
        doc = documents.cluster(
            info,
            {n.name: "running" for n in info.nodes},
            state="running",
            usd_per_hour=est.usd_per_hour,
            region=spec.effective_region,
        )
        print_json(documents.envelope("cluster", **doc))
        return
    table = new_table(("node", "address", "private_ip", "GPUs"))
    for n in info.nodes:
        reach = f"{n.public_ip}:{n.ssh_port}" if n.public_ip else f"via {info.head.name}"
        table.add_row(n.name, reach, n.private_ip, str(n.gpus))
    console().print(table)
    if est.usd_per_hour:
        progress(f"about {cost.money(est.usd_per_hour)}/hour until `gpufleet down {spec.name}`")


def _age(epoch: float | None) -> str:
    if not epoch:
        return "-"
    s = max(0, int(time.time() - epoch))
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d"


def _recorded(name: str) -> tuple[ClusterInfo | None, Estimate | None]:
    """(ClusterInfo, Estimate) of a recorded cluster; (None, None) when unreadable."""
    from gpufleet.clusters import cost
    from gpufleet.core import state

    try:
        info = state.load(name)
    except Exception:
        return None, None
    try:
        spec = state.load_spec(name)
        est = cost.estimate(spec) if spec is not None else None
    except Exception:
        est = None
    return info, est


def _adopted(name: str) -> bool:
    """A cluster `attach` adopted: `down` forgets it, its stack stays."""
    from gpufleet.clusters.attach import is_adopted

    info, _ = _recorded(name)
    return info is not None and is_adopted(info)


def down(
    names: Annotated[
        list[str], typer.Argument(help="cluster names", autocompletion=completers.clusters)
    ] = [],  # noqa: B006
    all_: Annotated[bool, typer.Option("--all", help="every recorded cluster")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask (with --all)")] = False,
) -> None:
    """Remove clusters and everything they created (an attached one: forget it only).

    Every named cluster is removed even if some are unknown or fail; exits 2 if a name was
    unknown, 8 if a removal failed. A cluster already gone is not an error.
    """
    import sys

    from gpufleet.clusters import ops
    from gpufleet.core import state
    from gpufleet.core.errors import GpufleetError

    targets = state.names() if all_ else list(dict.fromkeys(names))
    if not targets:
        if all_:
            progress("no clusters recorded")
            return
        raise typer.BadParameter("name a cluster, or pass --all")
    if all_ and not yes:
        if not sys.stdin.isatty():
            raise typer.BadParameter("--all removes every cluster; add --yes to confirm")
        typer.confirm(f"remove {len(targets)} clusters: {', '.join(targets)}?", abort=True)
    unknown, failed = [], []
    for name in targets:
        try:
            adopted = _adopted(name)
            if ops.destroy_name(name, progress):
                progress(f"cluster {name} {'forgotten' if adopted else 'removed'}")
            elif all_ or state.was_removed(name):
                progress(f"cluster {name}: already gone")
            elif (expired := state.expired_at(name)) is not None:
                progress(f"cluster {name}: already gone (it expired at {when(expired)})")
            else:
                unknown.append(name)
        except GpufleetError as e:
            failed.append(name)
            progress(f"cluster {name}: not removed: {e}" + (f" ({e.hint})" if e.hint else ""))
    if unknown:
        progress(f"no cluster named {', '.join(unknown)} (`gpufleet list` shows the clusters)")
    if failed or unknown:
        from gpufleet.components.exitcodes import ExitCode

        raise typer.Exit(ExitCode.OPERATION_FAILED if failed else ExitCode.USAGE)


def extend(
    name: opt.ClusterName,
    duration: Annotated[str, typer.Argument(help="new expiry from now, e.g. 2h")],
) -> None:
    """Move a kept cluster's expiry to DURATION from now."""
    from gpufleet.clusters import ops

    minutes = parse_ttl(duration)
    if minutes == 0:
        raise typer.BadParameter("give a duration above 0, e.g. 2h", param_hint="DURATION")
    when = ops.extend(name, minutes)
    progress(
        f"cluster {name} now expires at {time.strftime('%Y-%m-%d %H:%M', time.localtime(when))}"
    )


def sweep(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only list what would go")] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="remove cloud stacks without asking (scripts)")
    ] = False,
    backend: Annotated[str | None, typer.Option(help="Pulumi state backend URL")] = None,
) -> None:
    """Remove what no live gpufleet owns: clusters of dead `run`s, damaged records, sandbox
    processes whose cluster is gone, and cloud stacks in the Pulumi backend that are expired
    or that no live CLI here owns (asked on a terminal; --yes for scripts)."""
    import sys

    from gpufleet.clusters.sweep import sweep as sweep_leftovers

    def ask(question: str) -> None:
        typer.confirm(question, abort=True)

    found = sweep_leftovers(
        progress,
        dry_run=dry_run,
        yes=yes,
        backend=backend,
        confirm=ask if sys.stdin.isatty() else None,
    )
    if not found:
        progress("nothing to sweep")


def status(
    name: opt.ClusterName,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the cluster document (cluster.schema.json)")
    ] = False,
) -> None:
    """Show a cluster: type, expiry, $/hour, and whether each node is running."""
    from gpufleet.cli import documents
    from gpufleet.clusters import ops
    from gpufleet.core import state

    info, est = _recorded(name)
    if info is None:
        info = state.load(name)  # raises the right error (not found, unreadable)
    states = ops.node_states(info)
    doc = documents.cluster(
        info,
        states,
        state=documents.cluster_state(
            readable=True,
            orphaned=state.orphaned(name),
            expires_at=info.expires_at,
            node_states=states,
        ),
        usd_per_hour=est.usd_per_hour if est else None,
        region=est.region if est else None,
    )
    if as_json:
        print_json(documents.envelope("cluster", **doc))
        return
    price = f", ${est.usd_per_hour:.2f}/h" if est and est.usd_per_hour else ""
    out = console()
    out.print(
        f"{info.name}: {doc['state']}; {info.cloud}, {info.instance_type or info.cloud}, "
        f"fabric {info.fabric}"
        f"{price}; created {when(info.created_at)}, expires {when(info.expires_at)}"
    )
    table = new_table(("node", "state", "public_ip", "private_ip", "ssh_port", "GPUs"))
    for n in doc["nodes"]:
        table.add_row(
            *(
                "-" if n[c] is None else str(n[c])  # no public address: reached through the head
                for c in ("name", "state", "public_ip", "private_ip", "ssh_port", "gpus")
            )
        )
    out.print(table)


def list_clusters(
    as_json: Annotated[
        bool, typer.Option("--json", help="print the cluster list (cluster-list.schema.json)")
    ] = False,
) -> None:
    """List recorded clusters: cloud, state, age, expiry, nodes, type, $/hour."""
    from gpufleet.cli import documents
    from gpufleet.core import state

    docs = []
    for name in state.names():
        info, est = _recorded(name)
        if info is None:
            doc = documents.incomplete(name)
            doc["state"] = documents.cluster_state(readable=False, creating=state.locked(name))
            docs.append(doc)
            continue
        docs.append(
            documents.cluster(
                info,
                state=documents.cluster_state(
                    readable=True, orphaned=state.orphaned(name), expires_at=info.expires_at
                ),
                usd_per_hour=est.usd_per_hour if est else None,
                region=est.region if est else None,
            )
        )
    if as_json:
        print_json(documents.envelope("cluster-list", clusters=docs))
        return
    if not docs:
        typer.echo("no clusters (create one with `gpufleet up` or `gpufleet run`)")
        return
    table = new_table(("name", "cloud", "state", "age", "expires", "nodes", "type", "$/h"))
    for d in docs:
        table.add_row(
            d["name"],
            d["cloud"] or "?",
            d["state"],
            _age(d["created_at"]),
            when(d["expires_at"]),
            str(len(d["nodes"])),
            d["instance_type"] or "-",
            f"{d['usd_per_hour']:.2f}" if d["usd_per_hour"] else "-",
        )
    console().print(table)


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command("list")(list_clusters)
    app.command()(extend)
    app.command()(sweep)
    from gpufleet.cli import attach  # a fleet made with plain `pulumi up`

    attach.register(app)
