"""Per-node launch commands and rank environments: pure functions of ClusterInfo + options."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpufleet.components.catalog import instance_nccl_env
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.errors import SpecError
from gpufleet.components.fabric import library_paths
from gpufleet.jobs import hostfile
from gpufleet.remote import sshconfig

LAUNCHERS: tuple[str, ...] = ("torchrun", "none", "mpirun", "deepspeed")
WRAPPER = "rank_wrapper.py"
STORE = "rendezvous_store.py"
HOSTFILE = "hostfile"
STORE_READY = "gpufleet-store-ready"
# The store imports torch before it listens: a minute or more on a cold node, several on an
# emulated VM (TCG, torch shared over 9p). A store that exits says so at once, not at this limit.
STORE_START_S = 600.0
# What the launchers that reach the nodes over OpenSSH themselves (mpirun, DeepSpeed's pdsh)
# read: hosts named by their ssh-config aliases, and that config with node-to-node addresses.
LAUNCH_HOSTFILE = "hosts"
SSH_CONFIG = "ssh_config"
HOP = "hop/ssh"  # written by jobs/container.py (hop_script) when the ranks run in containers
DS_ENV = "deepspeed_env"
DS_ENV_RUN = "deepspeed_env.run"  # DS_ENV plus what only the head's shell knows (its $PWD)

# torchrun jobs: a lost peer must not hold the survivors in a collective when gpufleet is not
# there to stop them (pytorch/pytorch#111646). Defaults only: the cluster's env and --env win.
#  * ASYNC_ERROR_HANDLING=1 (TearDown): a collective that times out (init_process_group's
#    timeout: 10 min for NCCL by default) aborts the communicator and ends the process, so
#    torchrun sees a failed worker, instead of waiting on. torchrun sets 1 too when unset;
#    here it is also there for a job that starts its own processes.
#  * ENABLE_MONITORING=1 + HEARTBEAT_TIMEOUT_SEC=300: if the watchdog itself is stuck (a CUDA
#    or NCCL call that never returns once a peer is gone, where the abort above hangs too),
#    the monitor thread ends the process after 5 min without a heartbeat, not torch's default
#    (8-10 min by version). Not lower: torch raised it from 2 min to 10 (pytorch#116267)
#    after 2 min killed healthy jobs whose watchdog was only slow.
TORCH_TIMEOUTS: dict[str, str] = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",
}


@dataclass(frozen=True)
class LaunchOptions:
    launcher: str  # torchrun | none | mpirun | deepspeed
    command: list[str]  # torchrun/mpirun/deepspeed: script [args]; none: a shell command line
    nproc_per_node: int | None = None  # default: the node's GPUs, or 1 without GPUs
    master_port: int = 29500
    run_id: str = "run"
    env: dict[str, str] = field(default_factory=dict)
    # the ranks run in the run's containers (jobs/container.py): mpirun's and pdsh's ssh is
    # the run dir's HOP, which lands in the target node's container
    container: bool = False
    # `run --recover` (jobs/recover.py): which start of the job this is (0: the first), why it
    # was started again (a lost/preempted node, a rank's exit), and where the job keeps its
    # checkpoints: a bucket URL as given, else a folder under each node's workdir (the head's
    # is the one that counts: copied to every node before a restart)
    restart_count: int = 0
    recovery_reason: str = ""
    checkpoint_dir: str | None = None
    # torchrun's elastic mode, for jobs written for it: "MIN:MAX" nodes (--nnodes=MIN:MAX),
    # and how often torchrun itself restarts the workers after a failure (--max-restarts)
    elastic: str | None = None
    max_restarts: int = 0


def run_dir(opts: LaunchOptions) -> str:
    """This run's files on every node, relative to the node's workdir."""
    return f".gpufleet/runs/{opts.run_id}"


CHECKPOINTS = ".gpufleet/checkpoints"  # the default GPUFLEET_CHECKPOINT_DIR, under the workdir
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://")


def checkpoint_dir(opts: LaunchOptions) -> str:
    """The run's checkpoint folder relative to the workdir, or the bucket URL it was given."""
    return opts.checkpoint_dir or f"{CHECKPOINTS}/{opts.run_id}"


def is_url(path: str) -> bool:
    return bool(_URL.match(path))


def elastic_nodes(info: ClusterInfo, opts: LaunchOptions) -> tuple[int, int] | None:
    """(MIN, MAX) of LaunchOptions.elastic, checked against the cluster; None when not elastic."""
    if opts.elastic is None:
        return None
    fix = f"give elastic as MIN:MAX with 1 <= MIN <= MAX <= {len(info.nodes)} (the cluster's nodes)"
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", opts.elastic)
    if m is None:
        raise SpecError("elastic", f"{opts.elastic!r} is not MIN:MAX", fix)
    lo, hi = int(m.group(1)), int(m.group(2))
    if not 1 <= lo <= hi <= len(info.nodes):
        raise SpecError("elastic", f"{lo}:{hi} is out of range", fix)
    return lo, hi


def check(info: ClusterInfo, opts: LaunchOptions) -> None:
    """Raise SpecError for options that cannot launch on this cluster."""
    if opts.elastic is not None and opts.launcher != "torchrun":
        raise SpecError("elastic", f"needs the torchrun launcher, not {opts.launcher}",
                        "drop elastic or use --launcher torchrun")  # fmt: skip
    elastic_nodes(info, opts)
    if opts.max_restarts < 0:
        raise SpecError("max_restarts", f"{opts.max_restarts} is negative", "give 0 or more")


def rank_env(info: ClusterInfo, node_index: int, opts: LaunchOptions) -> dict[str, str]:
    """What every process on node `node_index` gets (the fabric's NCCL settings included)."""
    env = instance_nccl_env(info.cloud, info.instance_type, info.fabric, len(info.nodes))
    if opts.launcher == "torchrun":
        env.update(TORCH_TIMEOUTS)
        if opts.elastic is not None:  # the rank wrapper keeps c10d's ranks (see RANK_WRAPPER)
            env["GPUFLEET_ELASTIC"] = opts.elastic
    env.update(info.env)
    env.update(hostfile.env_vars(info, opts.nproc_per_node))
    env.update(
        {
            "GPUFLEET_NODE_RANK": str(node_index),
            "GPUFLEET_RUN_ID": opts.run_id,
            "GPUFLEET_RESTART_COUNT": str(opts.restart_count),
            "GPUFLEET_RECOVERY_REASON": opts.recovery_reason,
            "MASTER_PORT": str(opts.master_port),
        }
    )
    env.update(opts.env)  # the user's word wins
    return env


def _exports(info: ClusterInfo, node_index: int, opts: LaunchOptions) -> str:
    env = rank_env(info, node_index, opts)
    parts = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    # Absolute on the node, so a rank that changes directory still finds it.
    parts.append(f'GPUFLEET_HOSTFILE="$PWD"/{shlex.quote(run_dir(opts) + "/" + HOSTFILE)}')
    ckpt = checkpoint_dir(opts)
    if is_url(ckpt) or ckpt.startswith("/"):
        parts.append(f"GPUFLEET_CHECKPOINT_DIR={shlex.quote(ckpt)}")
    else:  # absolute on the node, as the hostfile, and there before the job looks
        parts.append(f'GPUFLEET_CHECKPOINT_DIR="$PWD"/{shlex.quote(ckpt)}')
    if not is_url(ckpt):
        parts.append('mkdir -p "$GPUFLEET_CHECKPOINT_DIR"')
    libs = library_paths(info.fabric)
    if libs:
        parts.append(
            f'LD_LIBRARY_PATH={shlex.quote(":".join(libs))}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'
        )
    names = sorted(env) + ["GPUFLEET_HOSTFILE", "GPUFLEET_CHECKPOINT_DIR"]
    names += ["LD_LIBRARY_PATH"] if libs else []
    return "; ".join(parts) + "; export " + " ".join(names)


def node_command(info: ClusterInfo, node_index: int, opts: LaunchOptions) -> str | None:
    """The shell command node `node_index` runs for this job, or None if it runs nothing."""
    check(info, opts)
    node = info.nodes[node_index]
    exports = _exports(info, node_index, opts)
    if opts.launcher == "torchrun":
        span = elastic_nodes(info, opts)
        nnodes = f"{span[0]}:{span[1]}" if span else str(len(info.nodes))
        # c10d rendezvous on a store gpufleet hosts on the head for the job's whole lifetime
        # (rendezvous_command), every agent a client (is_host=false): with the static
        # backend the head's agent hosts the store and, exiting first, leaves the others'
        # exit barrier talking to nobody (pytorch/pytorch#69520). Node order is restored
        # by the rank wrapper, since c10d numbers nodes in its own order.
        torchrun = [
            info.python,
            "-m",
            "torch.distributed.run",
            f"--nnodes={nnodes}",
            f"--nproc-per-node={hostfile.slots(node, opts.nproc_per_node)}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={rendezvous_endpoint(info, opts)}",
            f"--rdzv-id={opts.run_id}",
            "--rdzv-conf=is_host=false",
            f"--local-addr={node.private_ip}",
            f"--max-restarts={opts.max_restarts}",
            f"{run_dir(opts)}/{WRAPPER}",
            *opts.command,
        ]
        return f"{exports}; exec {shlex.join(torchrun)}"
    if opts.launcher == "none":
        # Like ssh: the words are joined into one shell command line.
        return f"{exports}; {' '.join(opts.command)}"
    if opts.launcher == "mpirun":
        if node_index != 0:
            return None
        env = rank_env(info, node_index, opts)
        env.pop("GPUFLEET_NODE_RANK")  # each rank's own: the rank wrapper sets it
        d = run_dir(opts)
        mpirun = ["mpirun", "--hostfile", f"{d}/{LAUNCH_HOSTFILE}"]
        # --map-by slot fills the hostfile's hosts in order: rank R is on the node whose
        # slots hold R, which the rank wrapper and mpi_output_node both rely on.
        mpirun += ["-np", env["GPUFLEET_WORLD_SIZE"], "--map-by", "slot"]
        # Every line a rank writes comes back as `[job,rank]<stdout>:line`: gpufleet shows it
        # under the rank's own node (mpi_output_node), not under the head mpirun runs on.
        mpirun += ["--tag-output"]
        # Open MPI starts its daemons with `ssh <alias> orted ...`: the run's ssh config gives
        # each alias its address, port, key and pinned host key.
        mpirun += ["--mca", "plm_rsh_args", f"-F {_on_node(d, SSH_CONFIG)}"]
        if opts.container:
            # from the head's container: the hop's ssh lands in each node's container; every
            # daemon from the head (no tree spawn), where the hop and its ssh config are
            mpirun += ["--mca", "plm_rsh_agent", _on_node(d, HOP)]
            mpirun += ["--mca", "plm_rsh_no_tree_spawn", "1"]
        # GPUFLEET_CHECKPOINT_DIR: the head's folder ("$PWD"-based, from the exports): Open
        # MPI starts every rank in mpirun's own directory, on every node.
        for k in sorted([*env, "GPUFLEET_CHECKPOINT_DIR"]):
            mpirun += ["-x", k]
        # The wrapper gives each rank the torch contract from Open MPI's variables.
        mpirun += [info.python, f"{d}/{WRAPPER}", *opts.command]
        # Open MPI refuses to run as root unless told twice (sandbox and container users).
        allow = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
        return f"{exports}; export {allow}; exec {_join_keep_pwd(mpirun)}"
    if opts.launcher == "deepspeed":
        if node_index != 0:
            return None
        d = run_dir(opts)
        runner = [info.python, "-m", "deepspeed.launcher.runner"]
        runner += ["--hostfile", f"{d}/{LAUNCH_HOSTFILE}", "--launcher", "pdsh"]
        # gpufleet checked SSH already; DeepSpeed's own check runs plain `ssh host`, which
        # knows nothing of the run's ssh config.
        runner += ["--no_ssh_check", f"--master_addr={info.head.private_ip}"]
        runner += [f"--master_port={opts.master_port}", *opts.command]
        # pdsh -R ssh appends PDSH_SSH_ARGS_APPEND to every ssh; DeepSpeed exports the lines
        # of DS_ENV_FILE to every node before its per-node launcher starts.
        # GPUFLEET_CHECKPOINT_DIR is added to the env file here: its value is the head's
        # "$PWD"-based folder, and DeepSpeed starts every rank in the head's directory.
        run_env = _on_node(d, DS_ENV_RUN)
        ds = (
            f'{{ cat "{_on_node(d, DS_ENV)}"; '
            f"printf 'GPUFLEET_CHECKPOINT_DIR=%s\\n' \"$GPUFLEET_CHECKPOINT_DIR\"; }} "
            f'> "{run_env}"; '
            f'PDSH_SSH_ARGS_APPEND="-F {_on_node(d, SSH_CONFIG)}"; '
            f'DS_ENV_FILE="{run_env}"; export PDSH_SSH_ARGS_APPEND DS_ENV_FILE'
        )
        if opts.container:  # pdsh -R ssh runs the `ssh` on PATH: the hop, into each container
            hop_dir = _on_node(d, HOP.rsplit("/", 1)[0])
            ds += f'; PATH="{hop_dir}:$PATH"; export PATH'
        return f"{exports}; {ds}; exec {shlex.join(runner)}"
    raise ValueError(f"unknown launcher {opts.launcher!r}")


# Open MPI's --tag-output: `[jobid,rank]<stdout>:` (4.x), with a space after the colon (5.x).
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<(?:stdout|stderr)>:")


def node_of_rank(info: ClusterInfo, opts: LaunchOptions, rank: int) -> str | None:
    """The node that holds global rank `rank` (nodes take their slots in hostfile order)."""
    first = 0
    for node in info.nodes:
        first += hostfile.slots(node, opts.nproc_per_node)
        if rank < first:
            return node.name
    return None


def mpi_output_node(
    info: ClusterInfo, opts: LaunchOptions, line: str, space: bool = False
) -> tuple[str | None, str]:
    """(node, text) of one line of mpirun's --tag-output; (None, line) for a line no rank
    wrote (mpirun's own). space: Open MPI 5 writes `: ` after the tag, 4.x only `:`."""
    m = _MPI_TAG.match(line)
    if m is None:
        return None, line
    node = node_of_rank(info, opts, int(m.group(1)))
    if node is None:
        return None, line
    text = line[m.end() :]
    if space and text.startswith(" "):
        text = text[1:]
    return node, text


def mpi_version_command(info: ClusterInfo, opts: LaunchOptions) -> str:
    """`mpirun --version` on the head, in the environment its launch gets."""
    return f"{_exports(info, 0, opts)}; mpirun --version"


def mpi_version(text: str) -> tuple[str, int] | None:
    """('openmpi', major) from `mpirun --version`; ('other', 0) for another MPI (MPICH,
    Intel MPI); None when there is no such output."""
    m = re.search(r"\(Open MPI\) (\d+)\.", text)
    if m:
        return "openmpi", int(m.group(1))
    return ("other", 0) if text.strip() else None


def rendezvous_endpoint(info: ClusterInfo, opts: LaunchOptions) -> str:
    """host:port of the job's rendezvous store (on the head, at the master port)."""
    host = info.head.private_ip
    return f"[{host}]:{opts.master_port}" if ":" in host else f"{host}:{opts.master_port}"


def rendezvous_command(info: ClusterInfo, opts: LaunchOptions) -> str:
    """The head's store process: up before any agent, gone when gpufleet closes its stdin.
    In the head ranks' environment (`--env` included): in a container, the interpreter may
    find torch only through what the user set there (e.g. PYTHONPATH to a mounted one)."""
    store = [info.python, f"{run_dir(opts)}/{STORE}", str(opts.master_port)]
    return f"{_exports(info, 0, opts)}; exec {shlex.join(store)}"


@contextmanager
def rendezvous(
    group: Any, info: ClusterInfo, opts: LaunchOptions, wrap: Any = None
) -> Iterator[None]:
    """torchrun: host the job's rendezvous store on the head while the block runs (in the
    head's container when `wrap`, RunContainers.wrap, is given)."""
    if opts.launcher != "torchrun":
        yield
        return
    cmd = rendezvous_command(info, opts)
    if wrap is not None:
        cmd = wrap(info.head.name, cmd)
    chan = group.hold(info.head.name, cmd, STORE_READY, timeout=STORE_START_S)
    try:
        yield
    finally:
        chan.close()


def _on_node(run_dir_: str, name: str) -> str:
    """A run file's absolute path on the node, for the shell to expand there."""
    return f"$PWD/{shlex.quote(run_dir_ + '/' + name)}"


def _join_keep_pwd(words: list[str]) -> str:
    """shlex.join, but a word holding $PWD is double-quoted so the node's shell expands it."""
    return " ".join(f'"{w}"' if "$PWD/" in w else shlex.quote(w) for w in words)


def run_files(info: ClusterInfo, opts: LaunchOptions) -> dict[str, str]:
    """Files every node needs before launch: the hostfile and the rank wrapper (and, for
    mpirun and deepspeed, their hostfile of ssh aliases, that ssh config and DeepSpeed's env)."""
    d = run_dir(opts)
    files = {
        f"{d}/{HOSTFILE}": hostfile.render(info, "openmpi", opts.nproc_per_node),
        f"{d}/{WRAPPER}": RANK_WRAPPER,
        f"{d}/{STORE}": RENDEZVOUS_STORE,
    }
    if opts.launcher in ("mpirun", "deepspeed"):
        files[f"{d}/{LAUNCH_HOSTFILE}"] = hostfile.render(
            info, "openmpi", opts.nproc_per_node, aliases=True
        )
        files[f"{d}/{SSH_CONFIG}"] = sshconfig.render(info, internal=True)
    if opts.launcher == "deepspeed":
        env = rank_env(info, 0, opts)
        env.pop("GPUFLEET_NODE_RANK")  # each node's own: DeepSpeed sets RANK and friends
        files[f"{d}/{DS_ENV}"] = "".join(f"{k}={v}\n" for k, v in sorted(env.items()))
    return files


# The job's c10d rendezvous store: serves until its stdin closes (gpufleet closes the channel
# after every node's agent has exited, or the connection drops because gpufleet died).
RENDEZVOUS_STORE = f'''\
"""gpufleet rendezvous store: a TCPStore that outlives every torchrun agent of the job."""
import os
import sys
from datetime import timedelta

from torch.distributed import TCPStore

store = TCPStore(
    "127.0.0.1", int(sys.argv[1]), is_master=True, wait_for_workers=False,
    timeout=timedelta(hours=1),
)
print("{STORE_READY}", flush=True)
# Later messages go to a file: nobody reads this channel's output until it closes.
log = os.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "store.log"),
              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
os.dup2(log, 1)
os.dup2(log, 2)
sys.stdin.read()
'''


# Runs the user's script (or `-m module`) as __main__ and, when it fails, records
# "<exit code> <unix time>" in rank-$RANK.rc next to itself: torchrun itself only reports 1,
# the job's own code lives here. Ranks follow gpufleet's node order (node-K holds ranks
# sum(slots[:K]) ...), whatever order the c10d rendezvous numbered the nodes in; every rank
# is a client of the agents' store, so renumbering them is consistent. Under mpirun it
# sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and the node rank from OMPI_*.
RANK_WRAPPER = '''\
"""gpufleet rank wrapper: run a script or module as __main__, record a failing exit code."""
import os
import runpy
import sys
import time
import traceback

_here = os.path.dirname(os.path.abspath(__file__))
_slots = os.environ.get("GPUFLEET_SLOTS_PER_NODE")
_e = os.environ
if _slots and "OMPI_COMM_WORLD_RANK" in _e:
    # Under mpirun (Open MPI) only OMPI_* is set: give the rank the torch contract. Its node
    # is the one whose slots hold it (--map-by slot over the hostfile, in node order);
    # OMPI_COMM_WORLD_NODE_RANK is no node index (it counts the node's processes).
    _r = int(_e["OMPI_COMM_WORLD_RANK"])
    _per = [int(s) for s in _slots.split(",")]
    _k, _first = 0, 0
    while _k < len(_per) - 1 and _r >= _first + _per[_k]:
        _first += _per[_k]
        _k += 1
    _local = int(_e["OMPI_COMM_WORLD_LOCAL_RANK"])
    if _local != _r - _first or _r >= sum(_per):
        sys.exit(
            "gpufleet: mpirun placed rank %d as local rank %d, not where the hostfile puts it "
            "(node %d, local rank %d): ranks need --map-by slot" % (_r, _local, _k, _r - _first)
        )
    _e.update(
        RANK=str(_r), WORLD_SIZE=_e["OMPI_COMM_WORLD_SIZE"], LOCAL_RANK=str(_local),
        LOCAL_WORLD_SIZE=_e["OMPI_COMM_WORLD_LOCAL_SIZE"], GROUP_RANK=str(_k),
        GPUFLEET_NODE_RANK=str(_k),
    )
_node = os.environ.get("GPUFLEET_NODE_RANK")
_ckpt = os.environ.get("GPUFLEET_CHECKPOINT_DIR", "")
if _ckpt and "://" not in _ckpt:  # there before the job looks, on nodes mpirun reached too
    try:
        os.makedirs(_ckpt, exist_ok=True)
    except OSError:
        pass
# Elastic (GPUFLEET_ELASTIC): the nodes present may be fewer than the cluster's, so gpufleet's
# node order would leave gaps; c10d's own numbering (dense, 0..WORLD_SIZE-1) stands.
if _slots and _node is not None and "LOCAL_RANK" in os.environ and not _e.get("GPUFLEET_ELASTIC"):
    _k = int(_node)
    _rank = sum(int(s) for s in _slots.split(",")[:_k]) + int(os.environ["LOCAL_RANK"])
    os.environ.update(RANK=str(_rank), GROUP_RANK=str(_k), ROLE_RANK=str(_rank))
_module = sys.argv[1] == "-m"
_target = sys.argv[2] if _module else sys.argv[1]
sys.argv = sys.argv[2:] if _module else sys.argv[1:]
if not _module:
    sys.path.insert(0, os.path.dirname(os.path.abspath(_target)))
else:
    sys.path.insert(0, os.getcwd())
_code = 0
try:
    if _module:
        runpy.run_module(_target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(_target, run_name="__main__")
except SystemExit as e:
    if e.code is None:
        _code = 0
    elif isinstance(e.code, int):
        _code = e.code
    else:
        print(e.code, file=sys.stderr)
        _code = 1
except BaseException:
    traceback.print_exc()
    _code = 1
if _code:
    with open(os.path.join(_here, "rank-%s.rc" % os.environ.get("RANK", "0")), "w") as f:
        f.write("%d %.6f\\n" % (_code, time.time()))
sys.stdout.flush()
sys.exit(_code)
'''


def first_failure(rank_files: dict[str, dict[str, str]]) -> tuple[str, int, int] | None:
    """(node, rank, code) of the earliest failing rank, from node -> {rank-K.rc: 'code time'}."""
    found = []
    for node, files in rank_files.items():
        for fname, text in files.items():
            try:
                code_s, time_s = text.split()[:2]
                rank = int(fname.removeprefix("rank-").removesuffix(".rc"))
                found.append((float(time_s), node, rank, int(code_s)))
            except ValueError:
                continue
    if not found:
        return None
    _, node, rank, code = min(found)
    return node, rank, code
