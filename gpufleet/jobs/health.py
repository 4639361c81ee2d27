"""Cluster health: node checks and the fabric probe on every node, and the gate before a job."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.resources import data_dir
from gpufleet.core.errors import GpufleetError
from gpufleet.jobs import launch
from gpufleet.provision import Progress, traits
from gpufleet.remote import Group

SCRIPTS = data_dir("scripts")
REMOTE_DIR = ".gpufleet/health"
CHECK = "health_check.py"
PROBE = "allreduce_probe.py"
PROBE_MARK = "GPUFLEET_ALLREDUCE "


@dataclass
class Expected:
    """What the catalog says a node of this cluster has."""

    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gib: float = 0.0
    fabric: str = "none"
    nvswitch: bool = False
    fabric_devices: int = 0  # EFA devices, or InfiniBand HCAs (ND: one per GPU)
    busbw_baseline_gbps: float | None = None


@dataclass
class NodeHealth:
    node: str
    ok: bool
    checks: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def reasons(self) -> list[str]:
        """Why it failed (or, when it passed, the notes of its checks)."""
        if self.error:
            return [self.error]
        picked = [c for c in self.checks if not c.get("ok", False)] if not self.ok else self.checks
        return [f"{c.get('name')}: {c.get('detail', '')}".strip() for c in picked]


class UnhealthyCluster(GpufleetError):
    """The health gate found failing nodes; the job was not started."""

    exit_code = 5

    def __init__(self, cluster: str, failed: list[NodeHealth]):
        names = ", ".join(h.node for h in failed)
        why = "; ".join(f"{h.node}: {', '.join(h.reasons)}" for h in failed)
        super().__init__(
            f"health gate: {names} of {cluster} failed the node check ({why})",
            hint=f"inspect with `gpufleet health {cluster}`; replace or repair those nodes",
        )
        self.failed = failed


def expected_for(info: ClusterInfo) -> Expected:
    """The catalog's figures for the cluster's instance type; nothing expected on the sandbox."""
    from gpufleet.components import catalog
    from gpufleet.components.errors import CatalogError

    if not traits(info.cloud).catalog or not info.instance_type:
        return Expected(fabric=info.fabric)
    try:
        it = catalog.lookup(info.cloud, info.instance_type)
    except CatalogError:
        return Expected(gpus=info.head.gpus, fabric=info.fabric)
    return Expected(
        gpus=it.gpus,
        gpu_model=it.gpu_model.split("-")[0],  # nvidia-smi names differ: "NVIDIA H100 80GB HBM3"
        gpu_memory_gib=it.gpu_memory_gib,
        fabric=it.fabric,
        nvswitch=it.nvswitch,
        fabric_devices=it.efa_interfaces if it.fabric == "efa" else it.gpus,
        busbw_baseline_gbps=it.allreduce_busbw_gbps,
    )


def check_command(
    info: ClusterInfo, exp: Expected, where: str = "", python: str | None = None
) -> str:
    """The node check's line. where="host": the host's part of a run with an image (driver,
    Fabric Manager, devices; no docker, no torch); "container": the part inside the run's
    container, with `python` (the image's): GPU visibility, the probes, NCCL's network."""
    import shlex

    args = [python or info.python, f"{REMOTE_DIR}/{CHECK}", "--expect-gpus", str(exp.gpus)]
    args += ["--fabric", exp.fabric]
    if where == "host":
        args += ["--no-container-check", "--skip-probes", "--skip-nccl-network"]
    elif where == "container":
        args.append("--in-container")
    if exp.gpu_model:
        args += ["--expect-model", exp.gpu_model]
    if exp.gpu_memory_gib:
        args += ["--expect-memory-gib", str(exp.gpu_memory_gib)]
    if exp.nvswitch:
        args.append("--nvswitch")
    if exp.fabric in ("efa", "infiniband"):
        args += ["--expect-fabric-devices", str(exp.fabric_devices)]
    if exp.fabric != "none":  # the node check then asks NCCL which network it loads
        args += ["--nodes", str(len(info.nodes))]
    return shlex.join(args)


def parse_report(node: str, exit_code: int | None, stdout: str, error: str | None) -> NodeHealth:
    """One node's check output -> NodeHealth; anything unreadable is a failure with the reason."""
    if error:
        return NodeHealth(node, False, error=error)
    doc = None
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                doc = None
            break
    if doc is None:
        try:
            doc = json.loads(stdout)
        except ValueError:
            return NodeHealth(node, False, error=f"check exited {exit_code} without a JSON report")
    return NodeHealth(node, bool(doc.get("ok")), checks=list(doc.get("checks", [])))


def _upload(group: Group) -> None:
    group.put({f"{REMOTE_DIR}/{n}": (SCRIPTS / n).read_text() for n in (CHECK, PROBE)})


# RunContainers.wrap: (node name, command) -> the line that runs it in that node's container
Wrap = Callable[[str, str], str]


def _on_nodes(group: Group, cmd: str, wrap: Wrap | None) -> str | dict[str, str]:
    return cmd if wrap is None else {n.name: wrap(n.name, cmd) for n in group.nodes}


def check_cluster(
    info: ClusterInfo,
    group: Group,
    timeout: float = 600,
    wrap: Wrap | None = None,
    python: str | None = None,
) -> dict[str, NodeHealth]:
    """Run the node check everywhere at once; node name -> its health. With `wrap` (a run's
    containers; `python`: the image's interpreter) in two parts: the host's own (driver,
    Fabric Manager, devices) on the host, what the ranks see in each node's container (the
    scripts are in the workdir, which the container has); a node passes when both do."""
    _upload(group)
    exp = expected_for(info)
    if wrap is None:
        return _reports(group.run(check_command(info, exp), check=False, timeout=timeout))
    host = _reports(group.run(check_command(info, exp, "host"), check=False, timeout=timeout))
    cmd = check_command(info, exp, "container", python)
    inside = _reports(group.run(_on_nodes(group, cmd, wrap), check=False, timeout=timeout))
    return {n: _merged(h, inside[n]) for n, h in host.items()}


def _reports(results: dict[str, Any]) -> dict[str, NodeHealth]:
    return {
        name: parse_report(name, r.exit_code, r.stdout, r.error or _stderr_error(r))
        for name, r in results.items()
    }


def _merged(host: NodeHealth, inside: NodeHealth) -> NodeHealth:
    """One node's health from its host check and its in-container check."""
    errors = [
        f"{where}: {h.error}" for where, h in (("host", host), ("container", inside)) if h.error
    ]
    return NodeHealth(
        host.node,
        host.ok and inside.ok,
        checks=host.checks + inside.checks,
        error="; ".join(errors) or None,
    )


def _stderr_error(r: Any) -> str | None:
    if r.exit_code not in (0, None) and not r.stdout.strip():
        return f"check exited {r.exit_code}: {r.stderr.strip()[-300:]}"
    return None


def fabric_probe(
    info: ClusterInfo,
    group: Group,
    sizes: str | None = None,
    iters: int = 5,
    stream: Any = None,
    wrap: Wrap | None = None,
) -> dict[str, Any]:
    """An all-reduce across the whole cluster through our launcher; rank 0's JSON report."""
    _upload(group)
    cmd = [f"{REMOTE_DIR}/{PROBE}", "--iters", str(iters), "--fabric", info.fabric]
    if sizes:
        cmd += ["--sizes", sizes]
    opts = launch.LaunchOptions(
        launcher="torchrun",
        command=cmd,
        master_port=29500 + secrets.randbelow(1000),
        run_id="health-" + secrets.token_hex(3),
    )
    group.put(launch.run_files(info, opts))
    commands = {n.name: launch.node_command(info, i, opts) for i, n in enumerate(info.nodes)}
    if wrap is not None:
        commands = {n: wrap(n, c) for n, c in commands.items() if c is not None}
    with launch.rendezvous(group, info, opts, wrap):
        results = group.run(commands, check=False, stream=stream, what="fabric probe")  # type: ignore[arg-type]
    for line in results[info.head.name].stdout.splitlines():
        if line.startswith(PROBE_MARK):
            report = json.loads(line[len(PROBE_MARK) :])
            report["baseline_busbw_gbps"] = expected_for(info).busbw_baseline_gbps
            return report
    failed = {n: r.exit_code for n, r in results.items() if not r.ok}
    raise GpufleetError(
        f"fabric probe gave no report (exit codes {failed or 'all 0'})",
        hint="see the node output above; torch must be installed on the nodes",
    )


def check(
    info: ClusterInfo,
    progress: Progress = lambda _m: None,
    stream: Any = None,
    *,
    fabric: bool = False,
    sizes: str | None = None,
) -> tuple[dict[str, NodeHealth], dict[str, Any] | None]:
    """What `gpufleet health` does: wait for SSH (60 s; a node refusing it fails), the node
    check everywhere, and with `fabric` the all-reduce probe (`stream` gets its node output).
    (node name -> its health, the probe's report or None)."""
    with Group(info) as group:
        group.wait_ready(60, refused_fails=True, progress=progress)
        reports = check_cluster(info, group)
        probe = None
        if fabric:
            progress(f"all-reduce probe across {len(info.nodes)} nodes")
            probe = fabric_probe(info, group, sizes, stream=stream)
    return reports, probe


def gate(
    info: ClusterInfo, group: Group, wrap: Wrap | None = None, python: str | None = None
) -> dict[str, NodeHealth]:
    """Raise UnhealthyCluster naming the failing nodes; return the reports when all pass."""
    reports = check_cluster(info, group, wrap=wrap, python=python)
    failed = [h for h in reports.values() if not h.ok]
    if failed:
        raise UnhealthyCluster(info.name, failed)
    return reports


def gate_hook(
    info: ClusterInfo, group: Group, wrap: Wrap | None = None, python: str | None = None
) -> None:
    """The `run --health-gate` hook (`wrap`: the run's containers, when it has an image;
    `python`: the image's interpreter, for the part of the check inside them)."""
    gate(info, group, wrap, python)
