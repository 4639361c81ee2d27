"""The `run` lifecycle: budget, record, deadline; create or reuse a cluster, launch, tear down."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.clusters import cost, lifecycle
from gpufleet.clusters.cost import Estimate
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec, ContainerSpec, RecoverySpec
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import deadline, state
from gpufleet.core.errors import (
    ConnectionClosed,
    GpufleetError,
    JobFailed,
    MissingTool,
    NodeExpired,
    NodeLost,
    SpecError,
)
from gpufleet.core.signals import Interrupted, raise_pending, shielded, start_threads
from gpufleet.jobs import launch, recover, runs, sync
from gpufleet.jobs.launch import LaunchOptions
from gpufleet.provision import LEASE, Progress, traits
from gpufleet.remote import Group
from gpufleet.remote.commands import tar_files
from gpufleet.remote.group import Stream
from gpufleet.remote.lease import LEASE_DIR_DEFAULT


# The lease a live `run` keeps renewing on the nodes it created: they remove themselves
# LEASE_S after the last renewal if this process dies (kill -9, a lost machine). Machines
# gpufleet did not create get none (provision.Provider.may_write): there a dead CLI's
# commands end with their SSH sessions (remote/commands.py, wrap_command).
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
# The lease each node of a cluster `run` creates arms from its own clock at first boot (its
# user data), for the time before the first renewal: a `run` killed while `pulumi up` or the
# SSH wait is still going leaves the nodes for this long instead of the hard expiry (24 h for
# `run`). It has to outlast what comes after a node's boot and before that renewal: the rest of
# the apply (the last nodes, an AWS head's EIP, Azure's role assignments: tens of minutes at
# worst) and the SSH wait (Provider.ssh_wait_s, 10 min on a cloud). 45 min covers both with a
# margin, and bounds a dead CLI's 2 x p5 at about $80 instead of a day's $2.6k.
BOOT_LEASE_MINUTES = 45


# run_job's record of the image and its digests (runs.Recorder.image), called by _job
OnImage = Callable[[str, dict[str, str]], None]
OnRecovery = Callable[[dict], None]  # run_job's record of each recovery (Recorder.recovery)


@dataclass
class JobRequest:
    launch: LaunchOptions
    workdir: Path
    spec: ClusterSpec | None = None  # create this cluster ...
    cluster: str | None = None  # ... or reuse this one (never torn down by the run)
    setup: str | None = None
    keep: bool = False  # keep a cluster this run created
    ssh_timeout: float | None = 600.0  # None: as long as the provider says (as `up` waits)
    # called (info, group); with an image also wrap=RunContainers.wrap and python=the image's
    # interpreter (info then is the hosts': their part of the check runs outside the image)
    health_gate: Callable[..., None] | None = None
    fail_fast: bool = True  # the first failing node stops the job everywhere
    include: list[str] = field(default_factory=list)  # sync these too, .gitignore or not
    exclude: list[str] = field(default_factory=list)  # never sync these
    provision_options: dict[str, object] = field(default_factory=dict)  # e.g. ssh inventory
    max_cost: float | None = None  # USD: refuse to start over it (cost.check_budget)
    timeout_s: float | None = None  # stop the whole run after this long (core/deadline.py)
    # every rank, --setup and the health gate in this image (jobs/container.py); None: the
    # cluster's recorded spec.container, if it has one
    container: ContainerSpec | None = None
    # what a lost or preempted node (or a rank's on_exit code) starts (jobs/recover.py); None:
    # the cluster's recorded spec.recovery, else none
    recovery: RecoverySpec | None = None

    def __post_init__(self) -> None:
        if (self.spec is None) == (self.cluster is None):
            raise GpufleetError(
                "a run needs a cluster to create (spec) or one to reuse (cluster), not "
                + ("both" if self.spec is not None else "neither"),
                hint="give exactly one of JobRequest(spec=...) and JobRequest(cluster=...)",
                exit_code=ExitCode.USAGE,
            )


class _LeaseKeeper:
    """Renews the node-side lease every RENEW_S while `run` is alive."""

    def __init__(self, group: Group, progress: Progress):
        self.group, self.progress = group, progress
        self.until = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def renew(self) -> None:
        # The node adds LEASE_S to its own clock (remote/lease.py); `until` is this process's
        # view of it, for telling an expiry from a lost node.
        until = time.time() + LEASE_S
        failed = {n: why for n, why in self.group.write_lease(LEASE_S).items() if why}
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
    whys = {r.node: group.lost.get(r.node, "its SSH connection dropped") for r in gone}
    whys.update({n: w for n, w in group.lost.items() if n not in whys})
    at = group.lost_at.get(first.node, first.finished)
    raise NodeLost(first.node, whys[first.node], whys=whys, at=at)


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


def _mpi_stream(
    info: ClusterInfo, opts: LaunchOptions, group: Group, stream: Stream, wrap: Any = None
) -> Stream:
    """mpirun on the head: each rank's line shown under its own node, with the tag removed."""
    head = info.head.name
    cmd = launch.mpi_version_command(info, opts)
    probe = group.subset([head]).run(wrap(head, cmd) if wrap else cmd, check=False)[head]
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


def run_job(
    req: JobRequest,
    progress: Progress,
    stream: Stream,
    on_end: Callable[[runs.RunRecord], None] | None = None,
) -> int:
    """The `run` lifecycle, for the command and for Python alike: --max-cost checked, then
    the job run (run_on_cluster) under --timeout, with its record and merged log kept under
    $GPUFLEET_HOME/runs/<id>/. 0, or the error that ended it; on_end gets the ended record."""
    existing = state.load(req.cluster or "") if req.spec is None else None
    check_containers(req, existing)
    check_recovery(req, existing)
    est = _budget(req, existing)
    if existing is None:
        assert req.spec is not None
        name, cloud, nodes = req.spec.name, req.spec.cloud, req.spec.nodes
    else:
        name, cloud, nodes = existing.name, existing.cloud, len(existing.nodes)
    rec = runs.RunRecord(
        id=req.launch.run_id,
        cluster=name,
        cloud=cloud,
        nodes=nodes,
        launcher=req.launch.launcher,
        command=list(req.launch.command),
        started_at=time.time(),
        usd_per_hour=est.usd_per_hour if est is not None else None,
    )
    recorder = runs.Recorder(rec)

    def say(message: str) -> None:
        progress(message)
        recorder.progress(message)

    def tee(node: str, line: str, is_err: bool) -> None:
        stream(node, line, is_err)
        recorder.line(node, line, is_err)

    say(f"run {rec.id} (`gpufleet logs {rec.id}`)")
    code, status, job_code = 1, "failed", None
    try:
        if req.timeout_s:
            deadline.arm(req.timeout_s)
        code = job_code = run_on_cluster(req, say, tee, recorder.image, recorder.recovery)
        status = "succeeded" if code == 0 else "failed"
        return code
    except deadline.TimedOut as e:
        code, status = e.exit_code, "timed out"
        raise
    except Interrupted as e:
        code, status = e.exit_code, "interrupted"
        raise
    except GpufleetError as e:
        code = e.exit_code
        if isinstance(e, JobFailed):
            job_code = e.code
        raise
    except EOFError as e:  # a connection closed under the run: recorded with its own code
        closed = ConnectionClosed(e)
        code = closed.exit_code
        raise closed from e
    finally:
        deadline.disarm()
        recorder.finish(code, status, job_code)
        cost = "" if rec.cost_usd is None else f", estimated cost ${rec.cost_usd:.2f}"
        elapsed = (rec.ended_at or time.time()) - rec.started_at  # finish() has set ended_at
        progress(f"run {rec.id} {status} in {elapsed:.1f}s{cost}")
        if on_end is not None:
            on_end(rec)


def _budget(req: JobRequest, info: ClusterInfo | None) -> Estimate | None:
    """--max-cost before anything starts: a new cluster's price at its TTL; on an existing
    one (info), what is left of its TTL bounds what the run can cost if the CLI itself dies."""
    if info is None:
        assert req.spec is not None
        est = cost.estimate(req.spec)
        cost.check_budget(est, req.max_cost)
        return est
    recorded = state.load_spec(info.name)
    if recorded is None:
        if req.max_cost is not None and traits(info.cloud).bills:
            why = f"cannot enforce ${req.max_cost:.2f}: the cluster's spec is not recorded"
            raise cost.OverBudget(req.max_cost, None, why)
        return None
    est = cost.remaining(recorded, info.expires_at, time.time())
    cost.check_budget(est, req.max_cost)
    return est


def drop_lease(group: Group, name: str, progress: Progress) -> dict[str, str]:
    """Remove the lease of a kept cluster's nodes, retrying once; the nodes that still hold
    theirs (node -> why) are said with the command that removes it: each removes itself
    when its lease runs out, however "kept" the cluster is."""
    failed = {n: why for n, why in group.write_lease(None).items() if why}
    if failed:
        again = group.subset(sorted(failed)).write_lease(None)
        failed = {n: why for n, why in again.items() if why}
    if failed:
        nodes = " ".join(f"--node {n}" for n in sorted(failed))
        progress(
            f"lease not removed on {', '.join(f'{n} ({w})' for n, w in sorted(failed.items()))}: "
            f"{'they remove themselves' if len(failed) > 1 else 'it removes itself'} within "
            f"{LEASE_S:.0f}s of the last renewal unless you run "
            f"`gpufleet exec {name} {nodes} -- sudo rm -f {LEASE_DIR_DEFAULT}/lease` before"
        )
    return failed


def with_boot_lease(spec: ClusterSpec) -> ClusterSpec:
    """The spec `run` creates: with a boot lease where gpufleet may write one on its nodes."""
    if LEASE not in traits(spec.cloud).may_write:
        return spec
    return spec.with_(boot_lease_minutes=BOOT_LEASE_MINUTES)


def run_on_cluster(
    req: JobRequest,
    progress: Progress,
    stream: Stream,
    on_image: OnImage | None = None,
    on_recovery: OnRecovery | None = None,
) -> int:
    """The job on its cluster: created for it (and removed after, unless kept) or an existing
    one. 0, or JobFailed carrying the first failing rank's code, or Interrupted. on_image:
    called (image, node -> digest) once a run with an image has it on every node."""
    try:
        cluster: contextlib.AbstractContextManager[ClusterInfo]
        if req.cluster:
            cluster = contextlib.nullcontext(state.load(req.cluster))
        else:
            assert req.spec is not None
            cluster = lifecycle.for_run(
                with_boot_lease(req.spec), progress, keep=req.keep, **req.provision_options
            )
        with cluster as info:
            return _job(info, req, progress, stream, req.cluster is None, on_image, on_recovery)
    finally:
        raise_pending()  # a signal during teardown still ends the CLI with its code


def check_containers(req: JobRequest, existing: ClusterInfo | None) -> None:
    """Before anything is created: the run's image where its provider can run it
    (containerhost.check_where, the one check)."""
    from gpufleet.jobs import containerhost

    cloud = existing.cloud if existing is not None else req.spec.cloud  # type: ignore[union-attr]
    spec = req.container
    if spec is None:
        recorded = req.spec if existing is None else state.load_spec(existing.name)
        spec = recorded.container if recorded is not None else None
    containerhost.check_where(cloud, spec)


def check_recovery(req: JobRequest, existing: ClusterInfo | None) -> None:
    """Before anything is created: a recovery that would need a new machine where the
    provider makes none (ssh) is refused now, not when a node is lost."""
    if existing is None:
        assert req.spec is not None
        name, cloud, recorded = req.spec.name, req.spec.cloud, req.spec.recovery
    else:
        spec = state.load_spec(existing.name)
        name, cloud = existing.name, existing.cloud
        recorded = spec.recovery if spec is not None else None
    rs = recover.spec_for(req.recovery, recorded)
    if rs.max:
        recover.check_replaces(name, cloud, rs.mode, ["a lost node"], traits(cloud).replaces)
    if rs.max and recover.needs_provider(rs.mode) and existing is not None and spec is None:
        # attached (a stack made with plain `pulumi up`): no saved spec to make a node from
        raise SpecError(
            "recover-mode",
            f"{rs.mode} needs the spec cluster {name!r} was made from, and it has none "
            "recorded (attached)",
            "use --recover-mode restart (the job again on the same nodes once they answer), "
            "or --recover-mode none",
        )


def container_spec(req: JobRequest, info: ClusterInfo) -> ContainerSpec | None:
    """The run's image: the request's, else the cluster's recorded spec.container."""
    if req.container is not None:
        return req.container
    spec = req.spec if req.spec is not None else state.load_spec(info.name)
    return spec.container if spec is not None else None


def _close_containers(boxes: Any, progress: Progress) -> None:
    """Remove the run's containers; whatever goes wrong is said, and the teardown after it
    (lease, connections, the cluster) still runs."""
    try:
        left = boxes.close()
    except Exception as e:
        progress(f"containers of run {boxes.run_id} not removed: {type(e).__name__}: {e}")
        return
    if left:
        progress(
            f"containers of run {boxes.run_id} still on "
            + "; ".join(f"{n} ({ids})" for n, ids in sorted(left.items()))
        )


def recovery_spec(req: JobRequest, info: ClusterInfo) -> RecoverySpec:
    """The run's recovery: the request's, else the cluster's recorded spec.recovery."""
    if req.recovery is not None:
        return req.recovery
    spec = req.spec if req.spec is not None else state.load_spec(info.name)
    return recover.spec_for(None, spec.recovery if spec is not None else None)


class _Attempts:
    """What lives across a run's attempts (the lease keeper, the group, the containers) and
    one attempt: connect, sync, containers, setup, gate, launch."""

    def __init__(
        self,
        req: JobRequest,
        progress: Progress,
        stream: Stream,
        created: bool,
        on_image: OnImage | None,
    ):
        from gpufleet.jobs import container

        self.req, self.progress, self.stream, self.created = req, progress, stream, created
        self.on_image = on_image
        self.group: Group | None = None
        self.lease: _LeaseKeeper | None = None
        self.boxes: container.RunContainers | None = None
        self.info: ClusterInfo | None = None
        self.notices: dict[str, dict] = {}  # the last attempt's preemption notices
        self.handled: set[tuple[str, float]] = set()  # notices an earlier recovery handled
        self.unleased: set[str] = set()  # replaced nodes whose boot lease nobody renews

    def connect(self, info: ClusterInfo, fresh: bool = False) -> Group:
        """A group for these nodes, once every one answers: a new one after any recovery
        (a replacement's addresses and host keys; the old group's `lost` marks), with the
        lease keeper moved to it before the old group closes."""
        if self.group is not None and self.info is info and not fresh:
            return self.group
        marker = f"GPUFLEET_RUN_ID={self.req.launch.run_id}"  # cancel() ends the ranks too
        old, group = self.group, Group(info, kill_marker=marker)
        started = time.monotonic()
        try:
            # a refused connection on a cluster that already existed: its node is gone
            lifecycle.wait_ready(
                group, self.progress, self.req.ssh_timeout, refused_fails=not self.created
            )
        except BaseException:
            with shielded():  # a signal here is raised after the cluster's teardown, as below
                group.close()
            raise
        self.info, self.group = info, group
        self.progress(f"SSH ready on {len(info.nodes)} nodes in {time.monotonic() - started:.1f}s")
        if self.created and LEASE in group.may_write:
            if self.lease is None:
                self.lease = _LeaseKeeper(group, self.progress)
                self.lease.start()
            else:
                self.lease.group = group
                self.lease.renew()
        elif self.unleased and LEASE in group.may_write:
            # a node made for a cluster this run did not create carries the saved spec's
            # boot lease, and nothing here renews it: it would remove itself mid-run
            drop_lease(group.subset(sorted(self.unleased)), info.name, self.progress)
        self.unleased = set()
        if old is not None:
            old.close()
        return group

    def run(self, info: ClusterInfo, restart: int = 0, rec: recover.Recovery | None = None) -> int:
        """One start of the job on every node: 0, or JobFailed / NodeLost as the job ended."""
        from gpufleet.jobs import container

        req, progress, stream = self.req, self.progress, self.stream
        group = self.connect(info, fresh=rec is not None)
        step = time.monotonic()
        opts, wrap = req.launch, None
        if opts.checkpoint_dir is None:  # the Python API's RecoverySpec names it too
            named = recovery_spec(req, info).checkpoint_dir
            if named:
                opts = dataclasses.replace(opts, checkpoint_dir=named)
        sync.sync(
            info,
            req.workdir,
            group=group,
            include=req.include,
            exclude=req.exclude,
            progress=progress,
            protect=synced_around(opts),
        )
        if rec is not None:
            opts = dataclasses.replace(opts, restart_count=restart, recovery_reason=rec.reason)
            _copy_checkpoints(info, group, opts, progress)
            rec.synced_at = time.time()
            progress(f"recovery {restart}: synced in {time.monotonic() - step:.1f}s")
        cspec = container_spec(req, info)
        if cspec is not None:
            hop = opts.launcher in ("mpirun", "deepspeed")
            started = container.start(info, group, cspec, opts.run_id, progress, ssh_keys=hop)
            self.boxes = started
            if self.on_image is not None:
                self.on_image(cspec.image, dict(started.report.digests))
            if opts.launcher in ("torchrun", "deepspeed"):
                started.need_python(f"--launcher {opts.launcher}")
            if req.health_gate:
                started.need_python("the health gate")
            # the ranks' interpreter is the image's (jobs/container.py python_command)
            host_info, info = info, info.model_copy(update={"python": started.python})
            opts = dataclasses.replace(opts, container=True)
            wrap = started.wrap
        boxes = self.boxes
        if req.setup:
            progress(f"setup: {req.setup}")
            setup: str | dict[str, str] = setup_command(info, req.setup)
            if boxes is not None:
                setup = boxes.every(setup_command(info, req.setup))
            group.run(setup, stream=stream, what="setup", liveness=True)
        if req.health_gate:
            if boxes is not None:  # the host's part with its python, the rest in the image's
                req.health_gate(host_info, group, wrap=boxes.wrap, python=boxes.python)
            else:
                req.health_gate(info, group)
        if restart:  # the last attempt's rank codes are not this one's
            group.run(f"rm -f {shlex.quote(launch.run_dir(opts))}/rank-*.rc", what="cleanup")
        group.put(launch.run_files(info, opts))
        if boxes is not None and opts.launcher in ("mpirun", "deepspeed"):
            # an executable `ssh`: Open MPI's plm_rsh_agent, and first on pdsh's PATH
            script = container.hop_script(info, boxes.facts, opts.run_id)
            hop_tar = tar_files({f"{launch.run_dir(opts)}/{launch.HOP}": script}, mode=0o755)
            group.run("tar -xf -", stdin=hop_tar, what="upload")
        commands = {
            n.name: cmd
            for i, n in enumerate(info.nodes)
            if (cmd := launch.node_command(info, i, opts)) is not None
        }
        job_stream = stream
        if opts.launcher == "mpirun":
            job_stream = _mpi_stream(info, opts, group, stream, wrap)
        progress(_launching(info, opts, commands))
        if boxes is not None:
            commands = boxes.wrap_all(commands)
        if rec is not None:
            rec.restarted_at = time.time()
        watch = None
        if watch_notices(info.cloud):
            watch = recover.NoticeWatch(
                info, opts.run_id, progress, group.cancel, handled=self.handled
            ).start()
        try:
            with launch.rendezvous(group, info, opts, wrap):
                results = group.run(
                    commands, stream=job_stream, check=False, fail_fast=req.fail_fast, liveness=True
                )
        finally:
            self.notices = watch.stop() if watch is not None else {}
        if boxes is not None and not all(r.ok for r in results.values()):
            # fail-fast killed the exec clients on the hosts, not what they started inside
            boxes.stop()
        if all(r.ok for r in results.values()):
            progress("job finished on every node")
            return 0
        _loss(info, group, results, self.lease.until if self.lease else 0.0)
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

    def stop_old_ranks(self, survivors: list[str], run_id: str) -> None:
        """Every rank of the last attempt stopped on the survivors, and proven gone: no
        process there has GPUFLEET_RUN_ID=run_id in its environment (else LeftoverRanks)."""
        assert self.group is not None
        self.group.cancel()
        if self.boxes is not None:
            self.boxes.stop()
            _close_containers(self.boxes, self.progress)
            self.boxes = None
        if not survivors:
            return
        sub = self.group.subset(survivors)
        found = sub.run(recover.leftovers_command(run_id, kill=True), check=False, timeout=60)
        left = {n: p for n, r in found.items() if (p := recover.parse_pids(r.stdout))}
        # a survivor that did not answer the check is not clean: its ranks may still run
        silent = {n: r.error or f"exit {r.exit_code}" for n, r in found.items() if not r.ok}
        silent.update({n: "no result" for n in survivors if n not in found})
        if left or silent:
            raise recover.LeftoverRanks(run_id, left, silent)
        self.progress(f"no rank of run {run_id} left on {', '.join(survivors)}")

    def close(self, info: ClusterInfo) -> None:
        """The run's end: containers, lease, connections (a kept cluster's lease dropped)."""
        if self.boxes is not None:
            _close_containers(self.boxes, self.progress)
        if self.lease is not None:
            self.lease.stop()
        group = self.group
        if self.created and self.req.keep and group is not None and LEASE in group.may_write:
            # kept: only its hard expiry applies now (the boot lease too goes, renewed or not)
            drop_lease(group, info.name, self.progress)
        if group is not None:
            group.close()


def synced_around(opts: LaunchOptions) -> list[str]:
    """The workdir folders a sync must neither overwrite nor delete: a relative checkpoint
    folder outside the run folders (those are never synced)."""
    ckpt = launch.checkpoint_dir(opts)
    if launch.is_url(ckpt) or ckpt.startswith(("/", "~")):
        return []
    rel = os.path.normpath(ckpt)
    if rel in (".", "") or rel.startswith("..") or rel.split("/")[0] == sync.RUNS_DIR:
        return []
    return [rel]


def _copy_checkpoints(
    info: ClusterInfo, group: Group, opts: LaunchOptions, progress: Progress
) -> None:
    """The head's checkpoint folder onto every other node before a restart (a new node has
    none, a survivor an older one); a URL is the job's own to read."""
    ckpt = launch.checkpoint_dir(opts)
    if not synced_around(opts) and opts.checkpoint_dir is not None or len(info.nodes) < 2:
        return  # a URL or an absolute path (a shared filesystem): the job's own to read
    started = time.monotonic()
    head = info.head.name
    out = group.subset([head]).run(recover.pack_command(ckpt), what="checkpoint")[head]
    data = recover.decode(out.stdout)
    if not data:
        progress(f"no checkpoint on {head} ({ckpt}): the job starts from scratch")
        return
    if len(data) > recover.CHECKPOINT_WARN_BYTES:
        progress(
            f"the checkpoint folder of {head} is {len(data) / 2**30:.1f} GiB packed, copied "
            "through this machine: a bucket URL as --checkpoint-dir is the way for this size"
        )
    others = [n.name for n in info.nodes if n.name != head]
    group.subset(others).run(recover.unpack_command(ckpt), stdin=data, what="checkpoint")
    progress(
        f"checkpoint folder of {head} ({len(data) / 1e6:.1f} MB packed) copied to "
        f"{len(others)} nodes in {time.monotonic() - started:.1f}s"
    )


def _notices(
    att: _Attempts, info: ClusterInfo, nodes: list[str], seen: dict[str, dict]
) -> dict[str, dict]:
    """The preemption notices of the attempt that ended: those its watch saw, and those
    the nodes that still answer have now (a node the cloud took already tells nothing),
    less those an earlier recovery handled."""
    out = dict(seen)
    alive = [n for n in nodes if att.group is not None and n not in att.group.lost]
    if att.group is not None and alive and (watch_notices(info.cloud) or seen):
        with contextlib.suppress(Exception):
            out.update(recover.read_notices(att.group.subset(alive), timeout=10))
    return recover.fresh(out, att.handled)


def watch_notices(cloud: str = "") -> bool:
    """Preemption notices are watched where the provider gives them, and on the sandbox when
    it is pointed at a fake metadata server (tests: provision/localpreempt.py)."""
    return bool((cloud and traits(cloud).notices) or os.environ.get("GPUFLEET_SANDBOX_METADATA"))


def _confirm(
    info: ClusterInfo, provisioner: Any, nodes: list[str], progress: Progress
) -> dict[str, tuple[bool, str]]:
    """Each lost node confirmed (recover.confirm_lost) at the same time: node -> (lost, why)."""
    status: dict[str, str] | None = None
    status_error: BaseException | None = None
    status_lock = threading.Lock()

    def provider_status() -> dict[str, str]:  # asked once for every node
        nonlocal status, status_error
        with status_lock:
            if status is None and status_error is None:
                try:
                    status = provisioner.status(info)
                except Exception as e:
                    status_error = e
            if status_error is not None:
                raise status_error
            assert status is not None
            return status

    def answers(names: list[str]) -> bool:
        for name in names:
            try:
                with Group(info, [name], connect_timeout=5) as g:
                    if g.run("true", check=False, timeout=10)[name].ok:
                        return True
            except Exception:
                continue
        return False

    others = [n.name for n in info.nodes if n.name not in nodes]
    out: dict[str, tuple[bool, str]] = {}

    def one(node: str) -> None:
        started = time.monotonic()
        progress(f"{node}: confirming the loss (provider's view, fresh SSH connections)")
        try:
            out[node] = recover.confirm_lost(
                node,
                provider_status,
                lambda: answers([node]),
                others_answer=(lambda: answers(others)) if others else None,
            )
        except Exception as e:
            out[node] = False, f"not confirmed: {type(e).__name__}: {e}"
        ok, why = out[node]
        progress(
            f"{node} {'lost' if ok else 'not lost'}: {why} ({time.monotonic() - started:.1f}s)"
        )

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in nodes]
    start_threads(threads)
    for t in threads:
        t.join()
    return out


def _recover(
    att: _Attempts,
    info: ClusterInfo,
    end: recover.Ending,
    spec: RecoverySpec,
    rec: recover.Recovery,
    progress: Progress,
) -> ClusterInfo:
    """Confirm every lost node, stop and prove gone the old ranks, replace what the mode
    says: the cluster the next attempt runs on. `rec` (made by the caller, recorded however
    this ends) gets the mode, the nodes and each step's time as it happens."""
    from gpufleet.provision import for_cloud

    req = att.req
    names = [n.name for n in info.nodes]
    provisioner = for_cloud(info.cloud, **req.provision_options)
    confirmed = list(end.nodes)
    if end.cause == "lost":
        found = _confirm(info, provisioner, list(end.nodes), progress)
        confirmed = [n for n in end.nodes if found[n][0]]
        doubt = [f"{n}: {found[n][1]}" for n in end.nodes if not found[n][0]]
        if doubt:
            rec.reason = f"{end.reason}; not lost ({'; '.join(doubt)})" + (
                "" if confirmed else ": restarted on the same nodes"
            )
    mode = recover.decide(end, spec, bool(confirmed))
    nodes = recover.targets(mode, dataclasses.replace(end, nodes=confirmed), names)
    rec.mode, rec.nodes = mode, nodes
    recover.check_replaces(info.name, info.cloud, mode, nodes, traits(info.cloud).replaces)
    step = time.monotonic()
    gone = set(nodes) if recover.needs_provider(mode) and end.cause != "exit" else set()
    gone |= set(confirmed) if end.cause == "lost" else set()
    att.stop_old_ranks([n for n in names if n not in gone], req.launch.run_id)
    progress(f"recovery {rec.attempt}: old ranks stopped in {time.monotonic() - step:.1f}s")
    att.handled |= {recover.notice_key(n, v) for n, v in end.notices.items()}
    if recover.needs_provider(mode):
        step = time.monotonic()
        progress(f"recovery {rec.attempt}: replacing {', '.join(nodes)} ({end.cause})")
        info = provisioner.replace(info, nodes, progress)
        rec.provisioned_at = time.time()  # only where a provider made nodes
        if not att.created:
            att.unleased |= set(nodes)
        progress(
            f"recovery {rec.attempt}: {', '.join(nodes)} replaced in {time.monotonic() - step:.1f}s"
        )
    return info


def _job(
    info: ClusterInfo,
    req: JobRequest,
    progress: Progress,
    stream: Stream,
    created: bool,
    on_image: OnImage | None = None,
    on_recovery: OnRecovery | None = None,
) -> int:
    """The job's attempts on its cluster: the first, then after each lost or preempted node
    (or a rank's --recover-on-exit code) a recovery and the next, while the spec allows.
    Every recovery started is recorded, the ones that failed too (their missing steps null);
    one that fails ends the run as the loss would have (RecoveryFailed, exit 5)."""
    spec = recovery_spec(req, info)
    ckpt = req.launch.checkpoint_dir or spec.checkpoint_dir
    if (
        spec.max
        and spec.mode == "relaunch"
        and not (ckpt and (launch.is_url(ckpt) or ckpt[0] == "/"))
    ):
        progress(
            "--recover-mode relaunch replaces the head too: its checkpoint folder goes with it "
            "and the job starts again from scratch; give --checkpoint-dir a bucket URL or a "
            "shared filesystem's path to resume"
        )
    att = _Attempts(req, progress, stream, created, on_image)
    attempt = 0
    rec: recover.Recovery | None = None

    def ended(r: recover.Recovery | None) -> None:
        if r is not None:
            progress(recover.summary(r))
            if on_recovery is not None:
                on_recovery(r.as_dict())

    try:
        while True:
            try:
                code = att.run(info, attempt, rec)
            except (NodeLost, JobFailed) as e:
                ended(rec)
                rec = None
                if spec.max == 0 or spec.mode == "none":
                    raise
                notices = _notices(att, info, [n.name for n in info.nodes], att.notices)
                end = recover.ending(e, notices, spec, getattr(e, "at", None) or time.time())
                if end is None:
                    raise
                if attempt >= spec.max:
                    progress(f"no recovery left ({spec.max} used): {end.reason}")
                    raise
                attempt += 1
                progress(f"recovery {attempt} of {spec.max}: {end.reason}")
                rec = recover.Recovery(
                    attempt=attempt,
                    cause=end.cause,
                    reason=end.reason,
                    mode=spec.mode,
                    nodes=list(end.nodes),
                    lost_at=end.lost_at,
                    detected_at=time.time(),
                )
                try:
                    info = _recover(att, info, end, spec, rec, progress)
                except (Interrupted, KeyboardInterrupt):
                    raise  # recorded in `finally`, the run ends with the signal's code
                except Exception as fail:
                    rec.reason = f"{rec.reason}; failed: {type(fail).__name__}: {fail}"
                    ended(rec)
                    rec = None
                    raise recover.RecoveryFailed(end, attempt, fail) from fail
                continue
            ended(rec)
            rec = None
            return code
    except (Interrupted, KeyboardInterrupt):
        if att.group is not None:
            with shielded():
                progress("interrupted: stopping the job on every node")
                att.group.cancel()
                if att.boxes is not None:
                    att.boxes.stop()
        raise
    finally:
        ended(rec)  # a recovery that did not reach its restart, or failed in it
        # A cluster made for this run is torn down next (lifecycle.for_run): the shield stays
        # up until that teardown ends, so no signal lands between the two.
        shield = shielded()
        shield.__enter__()
        try:
            att.close(info)
        finally:
            if not created:
                shield.__exit__()
