"""`--image` on the sandbox: this machine's own runtime must start a container, checked first."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.components.containerflags import NodeFacts, parse_probe, probe_command
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError, SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ContainerSpec

Run = Callable[..., Any]  # subprocess.run's shape
FIX = "use --cloud vm (its guests run podman), or drop --image"
_WORKS: set[str] = set()  # runtimes check_host saw start a container, in this process


class HostCannotRunContainers(GpufleetError):
    """The sandbox's nodes are this machine's processes: its runtime must work, and does not."""

    exit_code = ExitCode.USAGE

    def __init__(self, runtime: str, why: list[str], fix: str = FIX):
        super().__init__(
            f"--image on the sandbox needs {runtime} to start a container on this machine, "
            f"and it cannot: {'; '.join(why)}",
            hint=fix,
        )
        self.why = why


def cgroup_layout(mounts: str) -> str:
    """'v2', 'hybrid' (v1 controllers plus a v2 tree at /sys/fs/cgroup/unified) or 'v1', from
    /proc/self/mounts: crun and podman need the v2 tree at /sys/fs/cgroup itself."""
    points = {(f[1], f[2]) for ln in mounts.splitlines() if len(f := ln.split()) >= 3}
    if ("/sys/fs/cgroup", "cgroup2") in points:
        return "v2"
    if ("/sys/fs/cgroup/unified", "cgroup2") in points or Path("/sys/fs/cgroup/unified").is_dir():
        return "hybrid"
    return "v1"


def known_causes(
    runtime: str,
    *,
    mounts: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    exists: Callable[[str], bool] = os.path.exists,
) -> list[str]:
    """What is known to stop `runtime` here, without starting anything."""
    why = []
    if runtime == "podman":
        if mounts is None:
            mounts = Path("/proc/self/mounts").read_text()
        layout = cgroup_layout(mounts)
        if layout != "v2":
            why.append(
                f"cgroups are {layout} here (no cgroup2 at /sys/fs/cgroup): "
                "crun fails to create the container's cgroup"
            )
        if not any(which(r) for r in ("crun", "runc")):
            why.append("no OCI runtime (crun or runc) on PATH")
    if runtime == "docker" and not (
        os.environ.get("DOCKER_HOST") or exists("/var/run/docker.sock")
    ):
        why.append("no docker daemon (/var/run/docker.sock is absent, DOCKER_HOST unset)")
    return why


def start_test(facts: NodeFacts, run: Run) -> list[str]:
    """A real start, without an image where the runtime allows it: podman runs `true` from
    the host's own root (--rootfs /); docker needs an image, so its `info` (a daemon that
    answers) is the test. [] when it started, else why not."""
    if facts.runtime != "podman":
        return []
    argv = [*facts.prefix, "run", "--rm", "--network", "none", "--rootfs", "/", "true"]
    try:
        r = run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"`{' '.join(argv)}` could not run ({e})"]
    if r.returncode == 0:
        return []
    err = (r.stderr or r.stdout or "").strip().splitlines()
    return [f"`{' '.join(argv)}` exited {r.returncode}" + (f": {err[-1]}" if err else "")]


def check_where(cloud: str, container: ContainerSpec | None, flag: str = "--image") -> None:
    """The one check of where a run's or exec's image can run, before anything is created:
    a provider whose nodes run no containers is refused (naming `flag`); on the sandbox
    (containers="host") this machine's runtime must start one (check_host)."""
    if container is None:
        return
    from gpufleet.core.providers import traits

    where = traits(cloud).containers
    if not where:
        raise SpecError(
            flag,
            f"--cloud {cloud} runs no containers",
            f"use --cloud vm (QEMU VMs with podman) or a cloud, or drop {flag}",
        )
    if where == "host":
        check_host(container.runtime)


def check_host(runtime: str = "auto", *, run: Run | None = None) -> None:
    """Raise HostCannotRunContainers naming what is missing or broken on this machine (probe,
    then a start test, then the known causes), before anything is created. A runtime that
    started a container once is not started again in this process (the CLI checks before
    the plan, the job again for its Python callers: one real start per command)."""
    remember, run = run is None, run or subprocess.run
    if remember and runtime in _WORKS:
        return
    want = "docker or podman" if runtime == "auto" else runtime
    try:
        out = run(["sh", "-c", probe_command(runtime)], capture_output=True, text=True, timeout=60)
        facts = parse_probe(out.stdout)
    except (OSError, subprocess.TimeoutExpired) as e:
        facts = NodeFacts(problems=(f"the probe could not run ({e})",))
    why = list(facts.problems) if not facts.runtime else start_test(facts, run)
    if not why:
        if remember:
            _WORKS.add(runtime)
        return
    if facts.runtime:
        why = [f"{facts.runtime}: {w}" for w in why]
    for rt in ["docker", "podman"] if runtime == "auto" else [runtime]:
        if not shutil.which(rt):
            if f"{rt}: not installed" not in why:
                why.append(f"{rt}: not installed")
            continue  # says it all
        why += [f"{rt}: {c}" for c in known_causes(rt)]
    raise HostCannotRunContainers(want, why)
