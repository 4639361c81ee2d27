"""CLI: up, down, status, list."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from components.errors import SpecError
from gpufleet.cli.common import parse_pairs, parse_ttl, print_json, progress


def spec_from_flags(**flags: object):
    """Build and validate the ClusterSpec from CLI flags (only the ones given)."""
    from components.spec import ClusterSpec

    data = {k: v for k, v in flags.items() if v not in (None, [], {})}
    return ClusterSpec.from_input(data)


def _auto_name() -> str:
    import secrets

    return "gf-" + secrets.token_hex(3)


def up(
    name: Annotated[str | None, typer.Option("--name", "-n", help="cluster name")] = None,
    cloud: Annotated[str, typer.Option(help="local | vm | ssh | aws | gcp | azure")] = "local",
    nodes: Annotated[
        int | None, typer.Option(help="number of nodes (default 2; ssh: the hosts)")
    ] = None,
    instance_type: Annotated[str | None, typer.Option("--instance-type", "-t")] = None,
    region: Annotated[str | None, typer.Option()] = None,
    zone: Annotated[str | None, typer.Option()] = None,
    spot: Annotated[bool, typer.Option(help="use spot/preemptible capacity")] = False,
    public_workers: Annotated[
        bool, typer.Option(help="a public address on every node, not only the head")
    ] = False,
    ttl: Annotated[
        str, typer.Option(help="node-side expiry, e.g. 4h (0: none, local only)")
    ] = "4h",
    ssh_cidr: Annotated[list[str], typer.Option(help="CIDR allowed to SSH (repeat)")] = [],  # noqa: B006
    tag: Annotated[list[str], typer.Option(help="KEY=VALUE tag (repeat)")] = [],  # noqa: B006
    image: Annotated[str | None, typer.Option(help="image id/name instead of the default")] = None,
    backend: Annotated[str | None, typer.Option(help="Pulumi state backend URL")] = None,
    hosts: Annotated[
        str | None, typer.Option(help="cloud=ssh: your hosts, [user@]addr[:port],...")
    ] = None,
    inventory: Annotated[
        Path | None, typer.Option(help="cloud=ssh: inventory YAML (hosts, ports, GPUs, keys)")
    ] = None,
    ssh_user: Annotated[str | None, typer.Option(help="cloud=ssh: login user")] = None,
    ssh_key: Annotated[
        str | None, typer.Option(help="cloud=ssh: private key (default ~/.ssh/id_ed25519)")
    ] = None,
    accept_host_keys: Annotated[
        bool,
        typer.Option(help="cloud=ssh: pin the host keys the hosts present now (prints them)"),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the ClusterInfo as JSON")] = False,
) -> None:
    """Create a cluster and wait until every node answers SSH."""
    from gpufleet import ops
    from gpufleet.provision.ssh import from_flags
    from gpufleet.remote import Group

    byo, byo_options = from_flags(cloud, hosts, inventory, ssh_user, ssh_key, accept_host_keys)
    count = byo.pop("nodes", None)
    if nodes is not None and count is not None and nodes != count:
        raise SpecError("nodes", f"{nodes} nodes for {count} hosts", "drop --nodes")
    spec = spec_from_flags(
        name=_auto_name() if name is None else name,
        cloud=cloud,
        nodes=count or nodes or 2,
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
    )
    options = {"backend": backend} if backend else dict(byo_options)
    started = time.monotonic()
    progress(f"creating {spec.nodes} {spec.cloud} nodes for cluster {spec.name}")
    info = ops.create(spec, progress, **options)
    try:
        with Group(info) as g:
            g.wait_ready(timeout={"local": 30, "ssh": 60}.get(spec.cloud, 600), progress=progress)
    except BaseException:
        progress("nodes unreachable: removing what was created")
        ops.destroy(info, progress, **options)
        raise
    progress(f"cluster {spec.name} ready in {time.monotonic() - started:.1f}s")
    if as_json:
        print_json(info.model_dump())
    else:
        for n in info.nodes:
            reach = f"{n.public_ip}:{n.ssh_port}" if n.public_ip else f"via {info.head.name}"
            typer.echo(f"{n.name}\t{reach}\t{n.private_ip}\tgpus={n.gpus}")


def down(
    names: Annotated[list[str], typer.Argument(help="cluster names")] = [],  # noqa: B006
    all_: Annotated[bool, typer.Option("--all", help="every recorded cluster")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask (with --all)")] = False,
) -> None:
    """Remove clusters and everything they created.

    Every named cluster is removed even if some are unknown or fail; exits 2 if a name was
    unknown, 1 if a removal failed. A cluster already gone is not an error.
    """
    import sys

    from gpufleet import ops, state
    from gpufleet.errors import GpufleetError

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
            if ops.destroy_name(name, progress):
                progress(f"cluster {name} removed")
            elif all_ or state.was_removed(name):
                progress(f"cluster {name}: already gone")
            else:
                unknown.append(name)
        except GpufleetError as e:
            failed.append(name)
            progress(f"cluster {name}: not removed: {e}" + (f" ({e.hint})" if e.hint else ""))
    if unknown:
        progress(f"no cluster named {', '.join(unknown)} (`gpufleet list` shows the clusters)")
    if failed or unknown:
        raise typer.Exit(1 if failed else 2)


def extend(
    name: Annotated[str, typer.Argument(help="cluster name")],
    duration: Annotated[str, typer.Argument(help="new expiry from now, e.g. 2h")],
) -> None:
    """Move a kept cluster's expiry to DURATION from now."""
    from gpufleet import ops

    minutes = parse_ttl(duration)
    if minutes == 0:
        raise typer.BadParameter("give a duration above 0, e.g. 2h", param_hint="DURATION")
    when = ops.extend(name, minutes)
    progress(
        f"cluster {name} now expires at {time.strftime('%Y-%m-%d %H:%M', time.localtime(when))}"
    )


def sweep(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only list what would go")] = False,
) -> None:
    """Remove what no live gpufleet owns: clusters of dead `run`s, damaged records, and
    sandbox processes whose cluster is gone."""
    from gpufleet import ops, state
    from gpufleet.errors import StateDamaged
    from gpufleet.provision.local import stray_processes, terminate

    found = 0
    for name in state.names():
        if state.locked(name):
            continue  # being created right now
        why = None
        if state.orphaned(name):
            why = "its `run` is dead"
        else:
            try:
                state.load(name)
            except StateDamaged:
                why = "its record is damaged"
        if why:
            found += 1
            progress(f"{name}: {why}" + ("" if dry_run else ": removing"))
            if not dry_run:
                ops.destroy_name(name, progress)
    strays = stray_processes()
    if strays:
        found += 1
        progress(
            f"{len(strays)} sandbox processes of removed clusters"
            + ("" if dry_run else ": stopping")
        )
        if not dry_run:
            terminate(strays)
    if not found:
        progress("nothing to sweep")


def status(
    name: Annotated[str, typer.Argument(help="cluster name")],
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Show a cluster's nodes and whether each is running."""
    from gpufleet import state
    from gpufleet.provision import for_cloud

    info = state.load(name)
    states = for_cloud(info.cloud).status(info)
    rows = [
        {
            "node": n.name,
            "state": states.get(n.name, "unknown"),
            "public_ip": n.public_ip,
            "private_ip": n.private_ip,
            "ssh_port": n.ssh_port,
            "gpus": n.gpus,
        }
        for n in info.nodes
    ]
    if as_json:
        print_json(
            {"name": info.name, "cloud": info.cloud, "expires_at": info.expires_at, "nodes": rows}
        )
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{info.name} ({info.cloud}, {info.instance_type}, fabric {info.fabric})")
    for col in ("node", "state", "public_ip", "private_ip", "ssh_port", "gpus"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            *(
                "-" if r[c] is None else str(r[c])  # no public address: reached through the head
                for c in ("node", "state", "public_ip", "private_ip", "ssh_port", "gpus")
            )
        )
    Console().print(table)


def list_clusters(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """List recorded clusters."""
    from gpufleet import state

    rows = []
    for name in state.names():
        try:
            info = state.load(name)
        except Exception:
            what = "being created" if state.locked(name) else "damaged"
            rows.append({"name": name, "cloud": "?", "nodes": 0, "expires_at": None, "state": what})
            continue
        rows.append(
            {
                "name": name,
                "cloud": info.cloud,
                "nodes": len(info.nodes),
                "expires_at": info.expires_at,
                "state": "orphaned" if state.orphaned(name) else "recorded",
            }
        )
    if as_json:
        print_json(rows)
        return
    for r in rows:
        exp = "-"
        if r["expires_at"]:
            try:
                exp = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["expires_at"]))
            except (OverflowError, OSError, ValueError):
                exp = "never"
        extra = "" if r["state"] == "recorded" else f"\t{r['state']}"
        typer.echo(f"{r['name']}\t{r['cloud']}\t{r['nodes']} nodes\texpires {exp}{extra}")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command("list")(list_clusters)
    app.command()(extend)
    app.command()(sweep)
