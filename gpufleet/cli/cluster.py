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
        name=name or _auto_name(),
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
            g.wait_ready(timeout={"local": 30, "ssh": 60}.get(spec.cloud, 600))
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
) -> None:
    """Remove clusters and everything they created."""
    from gpufleet import ops, state

    targets = state.names() if all_ else names
    if not targets:
        raise typer.BadParameter("name a cluster, or pass --all")
    for name in targets:
        info = state.load(name)
        ops.destroy(info, progress)
        progress(f"cluster {name} removed")


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
            rows.append(
                {"name": name, "cloud": "?", "nodes": 0, "expires_at": None, "state": "incomplete"}
            )
            continue
        rows.append(
            {
                "name": name,
                "cloud": info.cloud,
                "nodes": len(info.nodes),
                "expires_at": info.expires_at,
                "state": "recorded",
            }
        )
    if as_json:
        print_json(rows)
        return
    for r in rows:
        exp = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["expires_at"]))
            if r["expires_at"]
            else "-"
        )
        typer.echo(f"{r['name']}\t{r['cloud']}\t{r['nodes']} nodes\texpires {exp}")


def register(app: typer.Typer) -> None:
    app.command()(up)
    app.command()(down)
    app.command()(status)
    app.command("list")(list_clusters)
