"""One-shot `run`: create (or reuse) a cluster, sync, set up, launch, and always tear down."""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.clusters import ops
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core import state
from gpufleet.core.errors import (
    GpufleetError,
    JobFailed,
    MissingTool,
    NodeExpired,
    NodeLost,
    SpecError,
)
from gpufleet.core.signals import Interrupted, raise_pending, shielded, start_threads
from gpufleet.jobs import launch, sync
from gpufleet.jobs.launch import LaunchOptions
from gpufleet.provision import LEASE, Progress
from gpufleet.remote import Group
from gpufleet.remote.group import Stream


# The lease a live `run` keeps renewing on the nodes it created: they remove themselves
# LEASE_S after the last renewal if this process dies (kill -9, a lost machine). Machines
# gpufleet did not create get none (provision.Provider.may_write): there a dead CLI's
# commands end with their SSH sessions (remote/group.py, wrap_command).
def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 1 <= value <= 366 * 86400:
        raise SpecError(
            name, f"{raw!r} is not a number of seconds", f"unset it, or e.g. {default:.0f}"
        )
    return value


LEASE_S = _env_seconds("GPUFLEET_LEASE_S", 300)
RENEW_S = _env_seconds("GPUFLEET_LEASE_RENEW_S", 60)


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
    fail_fast: bool = True  # the first failing node stops the job everywhere
    include: list[str] = field(default_factory=list)  # sync these too, .gitignore or not
    exclude: list[str] = field(default_factory=list)  # never sync these
    provision_options: dict[str, object] = field(default_factory=dict)  # e.g. ssh inventory


class _LeaseKeeper:
    """Renews the node-side lease every RENEW_S while `run` is alive."""

    def __init__(self, group: Group, progress: Progress):
        self.group, self.progress = group, progress
        self.until = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def renew(self) -> None:
        until = time.time() + LEASE_S
        failed = {n: why for n, why in self.group.write_lease(until).items() if why}
        if failed and len(failed) == len(self.group.nodes):
            self.progress(f"lease not renewed: {'; '.join(f'{n}: {w}' for n, w in failed.items())}")
        self.until = until

    def start(self) -> None:
        self.renew()
        start_threads([self._thread])

    def _loop(self) -> None:
        while not self._stop.wait(RENEW_S):
            self.renew()

    def stop(self) -> None:
        self._stop.set()


def _expired(info: ClusterInfo, lease_until: float) -> float | None:
    """When the nodes' expiry (hard TTL or lease) passed, if it has."""
    ends = [t for t in (info.expires_at, lease_until or None) if t]
    when = min(ends) if ends else None
    return when if when is not None and time.time() >= when - 5 else None


def _loss(info: ClusterInfo, group: Group, results: dict, lease_until: float) -> None:
    """A node that went away under the job: its expiry, or a lost node; never 'exited -1'."""
    gone = [r for r in results.values() if r.exit_code in (None, -1) and not r.ok]
    gone = [r for r in gone if r.node in group.lost or (r.error or "").startswith("lost")]
    if not gone:
        return
    first = min(gone, key=lambda r: r.finished)
    when = _expired(info, lease_until)
    if when is not None:
        raise NodeExpired(first.node, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when)))
    raise NodeLost(first.node, group.lost.get(first.node, "its SSH connection dropped"))


def setup_command(info: ClusterInfo, setup: str) -> str:
    """--setup runs with the ranks' interpreter first on PATH (its pip, its torchrun)."""
    if not info.python.startswith("/"):
        return setup
    bindir = shlex.quote(info.python.rsplit("/", 1)[0])
    return f"PATH={bindir}:$PATH; export PATH; {setup}"


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


def _launching(info: ClusterInfo, opts: LaunchOptions, commands: dict[str, str]) -> str:
    """The launch progress line: the job's nodes, and where a launcher reaches them from."""
    line = f"launching {opts.launcher} on {len(info.nodes)} nodes"
    if len(commands) < len(info.nodes):  # mpirun, deepspeed: one launcher reaches them all
        line += f" from {', '.join(commands)}"
    return f"{line} (run {opts.run_id})"


def _mpi_stream(info: ClusterInfo, opts: LaunchOptions, group: Group, stream: Stream) -> Stream:
    """mpirun on the head: each rank's line shown under its own node, with the tag removed."""
    head = info.head.name
    probe = group.subset([head]).run(launch.mpi_version_command(info, opts), check=False)[head]
    found = launch.mpi_version(probe.stdout + probe.stderr)
    if probe.exit_code == 127 or (probe.exit_code is not None and found is None):
        raise MissingTool(
            "mpirun",
            f"{head} has none: install Open MPI on every node (e.g. --setup "
            "'apt-get install -y openmpi-bin'), or use --launcher torchrun",
        )
    if found is not None and found[0] != "openmpi":
        raise SpecError(
            "launcher",
            f"mpirun on {head} is not Open MPI, the only MPI --launcher mpirun drives",
            "install Open MPI on the nodes, or use --launcher torchrun",
        )
    space = found is not None and found[1] >= 5

    def route(node: str, line: str, is_err: bool) -> None:
        owner, text = launch.mpi_output_node(info, opts, line, space)
        stream(owner or node, text, is_err)

    return route


def run_job(req: JobRequest, progress: Progress, stream: Stream) -> int:
    """Run the job: 0, or JobFailed carrying the first failing rank's code, or Interrupted."""
    created: ClusterInfo | None = None
    group: Group | None = None
    lease: _LeaseKeeper | None = None
    try:
        if req.cluster:
            info = state.load(req.cluster)
        else:
            assert req.spec is not None
            progress(f"creating {req.spec.nodes} {req.spec.cloud} nodes ({req.spec.name})")
            # owned by this process unless kept: `gpufleet sweep` removes it if we die
            owner = None if req.keep else os.getpid()
            info = created = ops.create(req.spec, progress, owner=owner, **req.provision_options)
        group = Group(info)
        started = time.monotonic()
        # a refused connection on a cluster that already existed: its node is gone
        group.wait_ready(req.ssh_timeout, refused_fails=created is None, progress=progress)
        progress(f"SSH ready on {len(info.nodes)} nodes in {time.monotonic() - started:.1f}s")
        if created is not None and LEASE in group.may_write:
            lease = _LeaseKeeper(group, progress)
            lease.start()
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
            group.run(setup_command(info, req.setup), stream=stream, what="setup", liveness=True)
        if req.health_gate:
            req.health_gate(info, group)
        group.put(launch.run_files(info, req.launch))
        commands = {
            n.name: cmd
            for i, n in enumerate(info.nodes)
            if (cmd := launch.node_command(info, i, req.launch)) is not None
        }
        job_stream = stream
        if req.launch.launcher == "mpirun":
            job_stream = _mpi_stream(info, req.launch, group, stream)
        progress(_launching(info, req.launch, commands))
        with launch.rendezvous(group, info, req.launch):
            results = group.run(
                commands, stream=job_stream, check=False, fail_fast=req.fail_fast, liveness=True
            )
        if all(r.ok for r in results.values()):
            progress("job finished on every node")
            return 0
        _loss(info, group, results, lease.until if lease else 0.0)
        if req.launch.launcher in ("torchrun", "mpirun"):
            rank_files = _rank_failures(group, launch.run_dir(req.launch))
            first = launch.first_failure(rank_files)
            if first:
                node, rank, code = first
                if req.launch.launcher == "mpirun":
                    # mpirun starts every rank in its own working directory's path, which on
                    # the sandbox is the head's folder: the rank's node is where its slot is
                    node = launch.node_of_rank(info, req.launch, rank) or node
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
            if lease is not None:
                lease.stop()
                if req.keep and group is not None:
                    group.write_lease(None)  # kept: only its hard expiry applies now
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
        raise_pending()  # a signal during teardown still ends the CLI with its code
