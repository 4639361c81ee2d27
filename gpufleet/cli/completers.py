"""Shell completion values: clusters, nodes, run ids, clouds, launchers, stacks, types.

A shell runs these at every TAB: they read local files only (no cloud SDK, no network, no
pydantic where a JSON read will do), and a failure completes nothing rather than print a
traceback into the command line.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import typer

from gpufleet.provision import PROVIDERS

Items = list[tuple[str, str]]  # (value, help): zsh and fish show the help next to the value

# The values of options that are plain strings (validated later, with a clear error); tests
# check each against the list the command validates with. Clouds: the providers' registry.
CLOUDS = {cloud: p.description for cloud, p in PROVIDERS.items()}
CATALOG_CLOUDS = tuple(cloud for cloud, p in PROVIDERS.items() if p.catalog)
LAUNCHERS = {
    "torchrun": "script or -m module, torch's environment on every rank",
    "none": "a shell command on every node",
    "mpirun": "Open MPI, one rank per GPU",
    "deepspeed": "a DeepSpeed script",
}
HOSTFILE_FORMATS = ("openmpi", "mpich", "deepspeed", "plain", "env")
SYNC_METHODS = ("auto", "rsync", "paramiko")
RUNTIMES = {
    "auto": "docker when the node has it, else podman",
    "docker": "docker only",
    "podman": "podman only",
}
RECOVER_MODES = {
    "replace": "only the lost nodes get new machines (same name and index)",
    "relaunch": "every node gets a new machine",
    "restart": "the job again on the same nodes",
    "none": "no recovery: a lost node ends the run",
}


def _quiet(fn: Callable[..., Items]) -> Callable[..., Items]:
    """A completer that fails completes nothing (a damaged record must not break TAB)."""

    @functools.wraps(fn)
    def run(*args, **kwargs) -> Items:
        try:
            return fn(*args, **kwargs)
        except Exception:
            return []

    return run


def choices(values: dict[str, str] | tuple[str, ...]) -> Callable[..., Items]:
    """A completer for a fixed set of values."""
    items = list(values.items()) if isinstance(values, dict) else [(v, "") for v in values]

    def complete(incomplete: str) -> Items:
        return [(v, h) for v, h in items if v.startswith(incomplete)]

    return complete


def _cluster_help(path: Path) -> str:
    """`aws, 2 nodes` from a cluster's record, read as JSON (pydantic would cost 100 ms)."""
    try:
        data = json.loads((path / "cluster.json").read_text())
        return f"{data['cloud']}, {len(data['nodes'])} nodes"
    except (OSError, ValueError, KeyError, TypeError):
        return "no record (being created, or damaged)"


@_quiet
def clusters(ctx: typer.Context, incomplete: str) -> Items:
    """Recorded clusters, less those already named on the line (`down a b <TAB>`)."""
    from gpufleet.core import state

    named = set(ctx.params.get("names") or ())
    root = state.home() / "clusters"
    return [
        (name, _cluster_help(root / name))
        for name in state.names()
        if name.startswith(incomplete) and name not in named
    ]


@_quiet
def nodes(ctx: typer.Context, incomplete: str) -> Items:
    """Nodes of the cluster named before (`ssh t <TAB>`, `exec t --node <TAB>`)."""
    from gpufleet.core import state

    # Before an option's value (`--node <TAB>`), click stops parsing: the words are left
    # unparsed in ctx.args, the cluster name first among them.
    name = ctx.params.get("name") or next((a for a in ctx.args if not a.startswith("-")), None)
    if not name:
        return []
    data = json.loads((state.cluster_dir(name) / "cluster.json").read_text())
    out = []
    for n in data["nodes"]:
        where = n.get("public_ip") or n.get("private_ip") or ""
        if n["name"].startswith(incomplete):
            out.append((n["name"], where))
    return out


@_quiet
def run_ids(incomplete: str) -> Items:
    """Recorded runs: `<id>` with its status, cluster and command."""
    from gpufleet.jobs import runs

    out = []
    root = runs.runs_dir()
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if not d.name.startswith(incomplete):
            continue
        try:
            rec = json.loads((d / runs.RECORD).read_text())
            why = f"{rec['status']} on {rec['cluster']}: {' '.join(rec['command'])}"[:80]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append((d.name, why))
    return out


@_quiet
def stacks(ctx: typer.Context, incomplete: str) -> Items:
    """Stack names: the Pulumi.<stack>.yaml files here, in ./stacks, --stacks-dir, shipped."""
    from gpufleet.components.stackconfig import STACKS_DIR, stack_file, stack_names

    root = ctx.params.get("stacks_dir")
    out = []
    for name in stack_names(root):
        if name.startswith(incomplete):
            where = stack_file(name, root).parent
            shipped = where == STACKS_DIR.resolve()
            out.append((name, "shipped with gpufleet" if shipped else str(where)))
    return out


@_quiet
def instance_types(ctx: typer.Context, incomplete: str) -> Items:
    """Catalog types, of the --cloud given before -t when it has a catalog; GPUs and price."""
    from gpufleet.components import catalog

    cloud = (ctx.params.get("cloud") or "").strip().lower()
    found = catalog.types(cloud if cloud in catalog.CLOUDS else None)
    return [
        (t.name, f"{t.cloud}: {t.gpus} x {t.gpu_model}" + _price(t.price_per_hour))
        for t in found
        if t.name.startswith(incomplete)
    ]


def _price(usd: float | None) -> str:
    return f", ${usd:.2f}/h" if usd else ""
