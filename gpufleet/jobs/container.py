"""A run's rank containers: probe, pull, one container per node, removed after the run."""

from __future__ import annotations

import os
import shlex
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpufleet.components import catalog, containerflags, containerimage
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerflags import NodeFacts
from gpufleet.core.errors import GpufleetError, MissingTool
from gpufleet.jobs import pull
from gpufleet.jobs.pull import PullReport

READY = "gpufleet-container-ready"
PY_MARK = "gpufleet-container-python:"
START_S = 300.0  # `run -d` of a pulled image: seconds on a warm node, more under emulation
Ensure = Callable[..., Any]  # pull.ensure_image's signature


def name_of(run_id: str, node: str | None = None) -> str:
    """The run's container name: the same on every node, or with the node's name where all
    nodes share one machine (the sandbox: provider trait containers="host")."""
    return f"gpufleet-{run_id}" + (f"-{node}" if node else "")


def container_name(info: ClusterInfo, run_id: str, node: str) -> str:
    from gpufleet.core.providers import traits

    return name_of(run_id, node if traits(info.cloud).containers == "host" else None)


def labels(info: ClusterInfo, run_id: str) -> dict[str, str]:
    return {"gpufleet.run": run_id, "gpufleet.cluster": info.name}


def refuse(facts: dict[str, NodeFacts], want: str) -> None:
    """MissingTool naming every node that cannot run a container, and why."""
    bad = {n: f for n, f in facts.items() if f.problems or not f.runtime}
    if not bad:
        return
    why = "; ".join(f"{n}: {', '.join(f.problems) or 'no runtime'}" for n, f in sorted(bad.items()))
    tool = "docker or podman" if want == "auto" else want
    raise MissingTool(
        f"a working container runtime ({tool}) on {', '.join(sorted(bad))} ({why})",
        f"install {tool} on those nodes (and start its daemon), or run without --image",
    )


def keeper_command(
    info: ClusterInfo,
    facts: NodeFacts,
    image: str,
    node_name: str,
    run_id: str,
    mounts: tuple[str, ...] = (),
    ssh_dirs: tuple[str, ...] = (),
) -> str:
    """The node's holding session: start the run's container detached, say READY, and remove
    it when this session's stdin closes or it is signalled (gpufleet closed the channel, the
    SSH session ended with a dead CLI, the session watch TERMed it)."""
    name = container_name(info, run_id, node_name)
    argv = containerflags.run_argv(
        facts,
        image,
        name=name,
        workdir=_WD,
        fabric=info.fabric,
        mounts=mounts,
        labels=labels(info, run_id),
        command=("sleep", "infinity"),
        topo_file=_type_facts(info)[0],
    )
    argv.insert(argv.index("run") + 1, "-d")
    cut = len(argv) - 3  # image, sleep, infinity
    head, tail = (shlex.join(a).replace(_WD, '"$PWD"') for a in (argv[:cut], argv[cut:]))
    # the cluster key and known_hosts for mpirun's and pdsh's hop, where this node has them
    extra = "".join(
        f'[ -d {shlex.quote(d)} ] && set -- "$@" -v {shlex.quote(d + ":" + d + ":ro")}\n'
        for d in ssh_dirs
    )
    rm = shlex.join([*facts.prefix, "rm", "-f", name])
    env, env_rm = (
        (_profile_env(), '[ -z "$e" ] || rm -f "$e"\n') if info.fabric == "tcpxo" else ("", "")
    )
    return (
        f"set --\n{extra}{env}"
        f"trap '{rm} >/dev/null 2>&1' EXIT\n"
        "trap 'exit 143' TERM INT HUP\n"
        f'{head} "$@" {tail} >/dev/null || exit 1\n'
        f"{env_rm}"
        f"echo {READY}\n"
        # in the background, so that a trapped signal ends `wait` (not a foreground `cat`);
        # through fd 3: an async list's own stdin is /dev/null
        "exec 3<&0\n"
        "cat <&3 >/dev/null 3<&- & c=$!\n"
        "trap 'kill $c 2>/dev/null; exit 143' TERM INT HUP\n"
        "wait $c\n"
    )


def _type_facts(info: ClusterInfo) -> tuple[str | None, int]:
    """The catalog's NCCL topology file and EFA interface count for the cluster's type
    (None, 0 when the type is unknown: own hosts, the sandbox)."""
    try:
        it = catalog.lookup(str(info.cloud), info.instance_type or "")
    except GpufleetError:
        return None, 0
    return it.nccl_topo_file, it.efa_interfaces


def _profile_env() -> str:
    """TCPXO: the NCCL_* that the plugin's nccl-env-profile.sh sets, as the node's bash gets
    them (the profile needs bash), into an env file for the container. As Cluster Toolkit's
    a3-megagpu-8g run-nccl-tests.sh does (it sources the profile on the host and passes NCCL*
    in); the rank's own exports still override them, as on the node."""
    p = shlex.quote(containerflags.TCPXO_PROFILE)
    lib = shlex.quote(containerflags.TCPXO_LIB)
    return (
        f"e=\nif [ -f {p} ]; then\n"
        "  e=$(mktemp) || exit 1\n"
        "  # shellcheck disable=SC2016 # $1: the profile's path, for bash\n"
        f"  env -i NCCL_LIB_DIR={lib} bash -c '. \"$1\" >/dev/null 2>&1; env' sh {p} |\n"
        "    grep '^NCCL_[A-Za-z0-9_]*=' >\"$e\"\n"
        '  set -- "$@" --env-file "$e"\n'
        "fi\n"
    )


# The node's workdir as the node's shell has it: every command gpufleet runs there starts in it
# (remote/commands.py wrap_command), and the workdir may be relative to $HOME ("gpufleet"),
# which a bind mount cannot be. It is mounted at the same absolute path.
_WD = "@GPUFLEET_WORKDIR@"


def exec_head(facts: NodeFacts, name: str) -> str:
    """`<prefix> exec -i -w "$PWD" <name>`: the head of every command run in the container,
    from the node's shell in its workdir."""
    return shlex.join([*facts.prefix, "exec", "-i", "-w", _WD, name]).replace(_WD, '"$PWD"')


def wrap_line(facts: NodeFacts, name: str, command: str) -> str:
    """`command` run by /bin/sh in the container, in the same workdir: its own exports apply."""
    return f"{exec_head(facts, name)} /bin/sh -c {shlex.quote(command)}"


def python_command(node_python: str) -> str:
    """Which interpreter the ranks use inside: the node's own path when the image has it
    (mounted, say), else the image's python3, else python."""
    cands = " ".join(shlex.quote(p) for p in (node_python, "python3", "python") if p)
    found = f'command -v "$p" >/dev/null 2>&1 && {{ echo "{PY_MARK}$p"; exit 0; }}'
    return f'for p in {cands}; do {found}; done; echo "{PY_MARK}"'


def _python_found(stdout: str) -> str:
    """python_command's answer: the interpreter's name or path, "" for none."""
    marks = [ln[len(PY_MARK) :].strip() for ln in stdout.splitlines() if ln.startswith(PY_MARK)]
    return marks[0] if marks else ""


def hop_script(
    info: ClusterInfo, facts: dict[str, NodeFacts], run_id: str, config: str | None = None
) -> str:
    """The `ssh` mpirun (plm_rsh_agent) and pdsh (first on PATH) call inside the head's
    container: the same ssh to the target node, whose command then runs in that node's
    container of this run (its runtime prefix, workdir), through /bin/sh -c. config: the
    ssh config; default the run's own (launch.SSH_CONFIG), found from the hop's place in
    the run dir (launch.HOP), whatever the workdir's path."""
    from gpufleet.jobs import launch
    from gpufleet.remote.sshconfig import aliases

    arms = []
    for n in info.nodes:
        f = facts.get(n.name)
        if f is None:
            continue
        # an ssh session starts in $HOME, the workdir's base when it is relative
        wd = shlex.quote(n.workdir)
        head = f"cd {wd} && {exec_head(f, container_name(info, run_id, n.name))}"
        pats = "|".join(shlex.quote(a) for a in [*aliases(info, n), n.private_ip])
        arms.append(f"  {pats}) pre={shlex.quote(head)} ;;")
    cfg = shlex.quote(config) if config else f'"$self/../{launch.SSH_CONFIG}"'
    return HOP_TEMPLATE.replace("CONFIG", cfg).replace("ARMS", "\n".join(arms))


# POSIX sh. ssh's own option letters that take an argument (ssh(1) SYNOPSIS); options may also
# follow the host, as OpenSSH allows (pdsh appends PDSH_SSH_ARGS_APPEND there).
HOP_TEMPLATE = r"""#!/bin/sh
# gpufleet: ssh into the run's container on the target node (mpirun's and pdsh's hop)
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
self=$(cd "$(dirname "$0")" && pwd)
real=
IFS_=$IFS; IFS=:
for d in $PATH; do
  [ "$d" = "$self" ] && continue
  [ -x "$d/ssh" ] && { real=$d/ssh; break; }
done
IFS=$IFS_
[ -n "$real" ] || { echo "gpufleet hop: no ssh client in this container's PATH" >&2; exit 255; }
opts='' host=''
while [ $# -gt 0 ]; do
  case $1 in
    -F) shift 2 ;;
    -[bcDeEiIJlLmoOpPQRSwW]) opts="$opts $(q "$1") $(q "$2")"; shift 2 ;;
    -*) opts="$opts $(q "$1")"; shift ;;
    *) [ -n "$host" ] && break; host=$1; shift ;;
  esac
done
[ -n "$host" ] || { echo "gpufleet hop: no host" >&2; exit 255; }
pre=
# shellcheck disable=SC2016 # each $PWD is the target node's, expanded there
case $host in
ARMS
  *) echo "gpufleet hop: $host is no node of this run" >&2; exit 255 ;;
esac
cmd="$pre /bin/sh -c $(q "$*")"
cfg=CONFIG
eval "exec \"\$real\" $opts -F $(q "$cfg") $(q "$host") $(q "$cmd")"
"""


class RunContainers:
    """The run's containers, one per node; a context manager that removes them all."""

    def __init__(
        self,
        info: ClusterInfo,
        group: Any,
        spec: ContainerSpec,
        run_id: str,
        facts: dict[str, NodeFacts],
        report: PullReport,
        images: dict[str, str],
    ):
        self.info, self.group, self.spec, self.run_id = info, group, spec, run_id
        self.facts, self.report, self.images = facts, report, images
        self.name = name_of(run_id)
        self.names = {n: container_name(info, run_id, n) for n in facts}
        self.python = info.python
        self.no_python: dict[str, str] = {}  # node -> the interpreter found, when not one for all
        self._chans: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.removed = False

    def wrap(self, node_name: str, command: str) -> str:
        """The shell line that runs `command` inside node_name's container of this run."""
        return wrap_line(self.facts[node_name], self.names[node_name], command)

    def wrap_all(self, commands: dict[str, str]) -> dict[str, str]:
        return {n: self.wrap(n, c) for n, c in commands.items()}

    def every(self, command: str) -> dict[str, str]:
        """The same command in every node's container (per-node lines: prefixes differ)."""
        return {n.name: self.wrap(n.name, command) for n in self.group.nodes}

    def _hold(self, node_name: str, ssh_dirs: tuple[str, ...]) -> None:
        cmd = keeper_command(
            self.info,
            self.facts[node_name],
            self.images[node_name],
            node_name,
            self.run_id,
            tuple(self.spec.mounts),
            ssh_dirs,
        )
        chan = self.group.hold(node_name, cmd, READY, timeout=START_S)
        with self._lock:
            self._chans[node_name] = chan

    def _start(self, ssh_dirs: tuple[str, ...]) -> None:
        nodes = [n.name for n in self.group.nodes]
        with ThreadPoolExecutor(max_workers=max(1, len(nodes))) as pool:
            futs = [pool.submit(self._hold, n, ssh_dirs) for n in nodes]
            errors = [f.exception() for f in futs if f.exception() is not None]
        if errors:
            raise errors[0]  # type: ignore[misc]
        res = self.group.run(self.every(python_command(self.info.python)), check=False)
        found = {n: _python_found(r.stdout) for n, r in res.items()}
        if len(set(found.values())) == 1 and all(found.values()):
            self.python = next(iter(found.values()))
        else:  # the node's path stays, for a job that needs none (need_python says so)
            self.no_python = found

    def need_python(self, why: str) -> None:
        """MissingTool when the image has no interpreter the ranks can use (on some node, or
        not the same on all): `why` (torchrun, the health gate) would exit 127 in it."""
        if not self.no_python:
            return
        where = "; ".join(f"{n}: {p or 'none'}" for n, p in sorted(self.no_python.items()))
        image = self.spec.image
        raise MissingTool(
            f"python (python3 or python) for {why} in image {image} ({where})",
            f"use an image with python3 on PATH (e.g. nvcr.io/nvidia/pytorch), or install it "
            f"in {image}; mpirun with a non-python command needs none",
        )

    def stop(self) -> None:
        """Remove every container of the run now: whatever ran inside ends with it (an exec
        client killed on the host leaves its process in the container running)."""
        with self._lock:
            if self.removed:
                return
            self.removed = True
        rm = {
            n.name: shlex.join([*self.facts[n.name].prefix, "rm", "-f", self.names[n.name]])
            for n in self.group.nodes
        }
        try:
            self.group.run(rm, check=False, timeout=60)
        finally:
            with self._lock:
                chans, self._chans = list(self._chans.values()), {}
            for c in chans:
                c.close()

    def leftovers(self) -> dict[str, str]:
        """node -> the ids of containers still labelled with this run (none, after stop), or
        "not checked (why)" where the node gave no answer: asked on every node at once."""
        label = f"label=gpufleet.run={self.run_id}"
        ps = {
            n.name: shlex.join([*self.facts[n.name].prefix, "ps", "-a", "-q", "--filter", label])
            for n in self.group.nodes
        }
        out = {}
        for n, r in self.group.run(ps, check=False, timeout=60).items():
            if r.error or r.exit_code is None or r.exit_code != 0:
                why = r.error or (r.stderr or "").strip()[-200:] or f"exit {r.exit_code}"
                out[n] = f"not checked ({why})"
            elif r.stdout.strip():
                out[n] = " ".join(r.stdout.split())
        return out

    def __enter__(self) -> RunContainers:
        return self

    def close(self) -> dict[str, str]:
        """stop(), then what is still there (node -> container ids): nothing, normally."""
        self.stop()
        try:
            return self.leftovers()
        except Exception as e:  # the connection is gone: nothing to ask, nothing to say
            return {"?": f"not checked ({type(e).__name__}: {e})"}

    def __exit__(self, *exc: object) -> None:
        left = self.close()
        if left and exc[0] is None:
            raise GpufleetError(
                f"containers of run {self.run_id} left after removal: "
                + "; ".join(f"{n}: {ids}" for n, ids in sorted(left.items())),
                hint="remove them with `<runtime> rm -f` on those nodes",
            )


def probe(group: Any, want: str) -> dict[str, NodeFacts]:
    """Every node's NodeFacts, probed in parallel over SSH."""
    res = group.run(containerflags.probe_command(want), check=False, timeout=120)
    facts = {}
    for n, r in res.items():
        f = containerflags.parse_probe(r.stdout)
        if r.exit_code is None:
            f = NodeFacts(problems=(f"the probe did not finish ({r.error})",))
        facts[n] = f
    return facts


def refuse_fabric(facts: dict[str, NodeFacts], fabric: str, topo_file: str | None) -> None:
    """ContainerLimitError / ContainerFabricError naming every node whose container could not
    get its limits, GPUs or fabric (what run_argv would raise on the node, after the pull)."""
    limits = [
        f"{n}: {p}" for n, f in sorted(facts.items()) for p in containerflags.limit_problems(f)
    ]
    if limits:
        raise containerflags.ContainerLimitError(limits)
    problems = [
        f"{n}: {p}"
        for n, f in sorted(facts.items())
        for p in containerflags.gpu_problems(f)
        + containerflags.fabric_problems(f, fabric, topo_file=topo_file)
    ]
    if problems:
        raise containerflags.ContainerFabricError(fabric, problems)


def check_efa(rc: RunContainers, interfaces: int, progress: Callable[[str], None]) -> None:
    """efa_check_command in every node's container before the job: ContainerFabricError with
    each failing node's reason (no libfabric/aws-ofi-nccl, fewer EFA interfaces than the type)."""
    res = rc.group.run(
        rc.every(containerflags.efa_check_command(interfaces)), check=False, timeout=120
    )
    mark, bad, said = containerflags.EFA_CHECK_MARK, [], []
    for n, r in sorted(res.items()):
        said_here = [
            ln[len(mark) :].strip() for ln in (r.stdout or "").splitlines() if ln.startswith(mark)
        ]
        why = said_here[-1] if said_here else ""
        if r.exit_code != 0 or not why.startswith("ok"):
            bad.append(f"{n}: {why or r.error or (r.stderr or '').strip() or 'no answer'}")
        else:
            said.append(why)
    if bad:
        raise containerflags.ContainerFabricError("efa", bad)
    progress(f"EFA in the containers: {said[0] if said else '?'} on {len(res)} nodes")


def _images(spec: ContainerSpec, report: PullReport, nodes: list[str]) -> dict[str, str]:
    """What each node runs: a registry image by its reference; a loaded archive by the image
    id it loaded as (its digest), which names no registry."""
    ref = containerimage.parse(spec.image)
    out = {}
    for n in nodes:
        digest = report.digests.get(n, "")
        if ref.is_archive:
            out[n] = digest or report.image or str(ref)
        else:
            out[n] = ref.reference
    return out


def start(
    info: ClusterInfo,
    group: Any,
    spec: ContainerSpec,
    run_id: str,
    progress: Callable[[str], None],
    *,
    ensure: Ensure | None = None,
    ssh_keys: bool = False,
) -> RunContainers:
    """Probe every node (MissingTool before anything runs), pull the image everywhere
    (pull.ensure_image, or `ensure`), and start the run's container on every node.
    ssh_keys: mount the cluster key's folder read-only (mpirun's and pdsh's hop need it)."""
    facts = probe(group, spec.runtime)
    refuse(facts, spec.runtime)
    topo, efa_interfaces = _type_facts(info)
    refuse_fabric(facts, info.fabric, topo)  # before the pull: a refused node pulls nothing
    runtimes = sorted({f"{f.runtime}{' (sudo)' if f.sudo else ''}" for f in facts.values()})
    progress(f"container runtime {', '.join(runtimes)} on {len(facts)} nodes")
    report: PullReport = (ensure or pull.ensure_image)(info, group, spec, facts, progress)
    digests = sorted(set(report.digests.values()))
    progress(f"image {spec.image} digest {', '.join(digests) or '?'} on {len(facts)} nodes")
    rc = RunContainers(info, group, spec, run_id, facts, report, _images(spec, report, list(facts)))
    dirs = (
        tuple(dict.fromkeys(os.path.dirname(p) for p in (info.ssh_key_path, info.known_hosts_path)))
        if ssh_keys
        else ()
    )
    try:
        rc._start(dirs)
        if info.fabric == "efa":
            check_efa(rc, max(1, efa_interfaces), progress)
    except BaseException:
        rc.stop()
        raise
    progress(f"containers {', '.join(sorted(set(rc.names.values())))} up on {len(facts)} nodes")
    return rc
