"""One-shot `run`: create (or reuse) a cluster, sync, set up, launch, and always tear down."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from components.spec import ClusterInfo, ClusterSpec
from gpufleet import launch, ops, state, sync
from gpufleet.errors import GpufleetError, JobFailed
from gpufleet.launch import LaunchOptions
from gpufleet.provision import Progress
from gpufleet.remote import Group
from gpufleet.remote.group import Stream
from gpufleet.signals import Interrupted, shielded


@dataclass
class JobRequest:
    launch: LaunchOptions
    workdir: Path
    spec: ClusterSpec | None = None  # create this cluster ...
    cluster: str | None = None  # ... or reuse this one (never torn down by the run)
    setup: str | None = None
    keep: bool = False  # keep a cluster this run created
    ssh_timeout: float = 600.0
    health_gate: Callable[[ClusterInfo, Group], None] | None = None
    include: list[str] = field(default_factory=list)  # sync these too, .gitignore or not
    exclude: list[str] = field(default_factory=list)  # never sync these
    provision_options: dict[str, object] = field(default_factory=dict)  # e.g. ssh inventory


def _rank_failures(group: Group, run_dir: str) -> dict[str, dict[str, str]]:
    """node -> {rank-K.rc: '<code> <time>'} for every rank that wrote one."""
    d = shlex.quote(run_dir)
    cmd = (
        f'for f in {d}/rank-*.rc; do [ -e "$f" ] && '
        f'printf "%s %s\\n" "${{f##*/}}" "$(cat "$f")"; done; true'
    )
    out: dict[str, dict[str, str]] = {}
    for node, r in group.run(cmd, check=False).items():
        for line in r.stdout.splitlines():
            fname, _, rest = line.partition(" ")
            if fname.endswith(".rc"):
                out.setdefault(node, {})[fname] = rest
    return out


def _first_failed_node(results: dict) -> tuple[str, int]:
    failed = [r for r in results.values() if not r.ok]
    first = min(failed, key=lambda r: r.finished)
    return first.node, first.exit_code or 1


def run_job(req: JobRequest, progress: Progress, stream: Stream) -> int:
    """Run the job: 0, or JobFailed carrying the first failing rank's code, or Interrupted."""
    created: ClusterInfo | None = None
    group: Group | None = None
    try:
        if req.cluster:
            info = state.load(req.cluster)
        else:
            assert req.spec is not None
            progress(f"creating {req.spec.nodes} {req.spec.cloud} nodes ({req.spec.name})")
            info = created = ops.create(req.spec, progress, **req.provision_options)
        group = Group(info)
        started = time.monotonic()
        group.wait_ready(req.ssh_timeout)
        progress(f"SSH ready on {len(info.nodes)} nodes in {time.monotonic() - started:.1f}s")
        sync.sync(
            info,
            req.workdir,
            group=group,
            include=req.include,
            exclude=req.exclude,
            progress=progress,
        )
        if req.setup:
            progress(f"setup: {req.setup}")
            group.run(req.setup, stream=stream, what="setup")
        if req.health_gate:
            req.health_gate(info, group)
        group.put(launch.run_files(info, req.launch))
        commands = {
            n.name: cmd
            for i, n in enumerate(info.nodes)
            if (cmd := launch.node_command(info, i, req.launch)) is not None
        }
        progress(
            f"launching {req.launch.launcher} on {len(commands)} nodes (run {req.launch.run_id})"
        )
        with launch.rendezvous(group, info, req.launch):
            results = group.run(commands, stream=stream, check=False)
        if all(r.ok for r in results.values()):
            progress("job finished on every node")
            return 0
        if req.launch.launcher == "torchrun":
            rank_files = _rank_failures(group, launch.run_dir(req.launch))
            first = launch.first_failure(rank_files)
            if first:
                node, rank, code = first
                raise JobFailed(node, code, f"rank {rank}")
        node, code = _first_failed_node(results)
        raise JobFailed(node, code)
    except (Interrupted, KeyboardInterrupt):
        if group is not None:
            with shielded():
                progress("interrupted: stopping the job on every node")
                group.cancel()
        raise
    finally:
        with shielded():
            if group is not None:
                group.close()
            if created is not None and not req.keep:
                progress(f"tearing down {created.name}")
                try:
                    ops.destroy(created, progress, **req.provision_options)
                except GpufleetError as e:
                    progress(f"teardown failed: {e}; run `gpufleet down {created.name}`")
                    raise
            elif created is not None:
                progress(
                    f"kept cluster {created.name}: remove it with `gpufleet down {created.name}`"
                )
