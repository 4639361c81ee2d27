"""The runtime command line of a node's rank container: pure, per runtime and fabric."""

# Sources (read 2026-11-25; the page docs/container-fabric.md has the table):
# [ctk-cdi]  NVIDIA Container Toolkit, "Support for Container Device Interface",
#            https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html
#            (`nvidia-ctk cdi generate`; specs in /etc/cdi and /var/run/cdi; podman and docker
#            take `--device nvidia.com/gpu=all`; toolkit >= 1.18 writes /var/run/cdi itself).
# [ctk-190]  NVIDIA/nvidia-container-runtime#190: with only a CDI spec, `podman run --gpus all`
#            gives a container without the GPUs; `--device nvidia.com/gpu=all` works.
# [efa-ctr]  AWS, "Install the EFA software in a container",
#            https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-installer-containers.html
#            (libfabric + aws-ofi-nccl go in the image: efa_installer.sh --skip-kmod
#            --skip-limit-conf --no-verify; the limits come from the container's creation).
# [do-eks63] aws-samples/aws-do-eks#63 and [lf12708] ofiwg/libfabric#12708: with all of
#            /dev/infiniband in the container, a non-EFA verbs device (mlx5 on B200 hosts) that
#            cannot be opened makes the EFA provider return nothing (fi_info -61) and NCCL ran
#            over TCP; only the EFA uverbs devices must go in.
# [ofi1020]  aws/aws-ofi-nccl#1020: nvcr.io/nvidia/pytorch without the uverbs devices:
#            "NET/OFI OFI fi_getinfo() call failed: No data available".
# [dstack]   dstackai/dstack @511c318: gcp/features/tcpx.py (the receive-datapath-manager
#            containers) and server/services/backends/provisioning.py (the job container's
#            mounts: /run/tcpx and /var/lib/tcpx/lib64 on a3-high; /dev/aperture_devices,
#            /var/lib/tcpxo/lib64, /var/lib/fastrak/lib64 on a3-mega).
# [ctk-a3]   GoogleCloudPlatform/cluster-toolkit examples/machine-learning/a3-megagpu-8g/
#            nccl-tests/run-nccl-tests.sh: the container gets /var/lib/tcpxo/lib64 and
#            NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY=/dev/aperture_devices.
# [ngc]      reference/cloud-gpu-facts.md, second reviews: NGC images warn on a 64 MB /dev/shm;
#            `--ipc=host --ulimit memlock=-1 --ulimit stack=67108864`.
# [nofile]   docker/docs#23730 (closes moby/moby#51485): with Docker Engine 29 / containerd
#            2.1.5 `docker run ubuntu sh -c 'ulimit -n'` went from 1048576 to 1024; TCPX sockets
#            and data loaders run out, so the container asks for 1048576 itself.
# [gdrcopy]  GDRCopy (NVIDIA/gdrcopy): the gdrdrv kernel module's /dev/gdrdrv; NCCL uses GDRCopy
#            only when the device is in the container.
# [rootless] a rootless engine cannot raise a hard limit above the user's own: memlock=-1 fails
#            at start unless `ulimit -H -l` is already unlimited (issue 21 review).
# [efa-ngc]  AWS efa-installer-containers page: installer >= 1.49.0 takes --enable-ngc for NGC
#            containers instead of --skip-kmod --skip-limit-conf --no-verify (read 2026-11-25).

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from gpufleet.components import fabric as fabric_env
from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode

RUNTIMES = ("docker", "podman")
GIB = 1024**3
SHM_CAP = 200 * GIB  # with IPC not shared: min(1/3 of memory, 200 GB)
STACK_BYTES = 64 * 1024 * 1024  # `ulimit -s`: 64 MiB, NVIDIA's container recommendation [ngc]
PROBE_MARK = "gpufleet-container-probe:"
EFA_CHECK_MARK = "gpufleet-efa-check:"
RXDM_NAME = "gpufleet-rxdm"  # the receive-datapath manager images/steps/40-fabric.sh starts

# Host paths a fabric's rank container needs; the probe reports which exist.
TCPX_LIB, TCPX_SOCKETS = "/var/lib/tcpx/lib64", "/run/tcpx"
TCPXO_LIB, FASTRAK_LIB = "/var/lib/tcpxo/lib64", "/var/lib/fastrak/lib64"
APERTURE = "/dev/aperture_devices"
IB_DEVICES = "/dev/infiniband"
NCCL_CONF = "/etc/nccl.conf"  # NCCL reads it itself; Azure images and 50-nccl-env.sh write it
GDRDRV = "/dev/gdrdrv"  # GDRCopy [gdrcopy]
# Cluster Toolkit a3-megagpu-8g run-nccl-tests.sh sources it on the host and passes NCCL_* in;
# it needs bash (dstack's a3mega nccl-tests example runs it with bash, not dash).
TCPXO_PROFILE = f"{TCPXO_LIB}/nccl-env-profile.sh"
NOFILE = 1048576  # [nofile]
_PROBED_PATHS = (
    IB_DEVICES, APERTURE, TCPX_SOCKETS, TCPX_LIB, TCPXO_LIB, FASTRAK_LIB, NCCL_CONF, GDRDRV
)  # fmt: skip


class ContainerFabricError(GpufleetError):
    """A node lacks what its rank container needs for the cluster's fabric."""

    exit_code = ExitCode.NODE_FAILED

    def __init__(self, fabric: str, problems: list[str]):
        super().__init__(
            f"the rank container cannot use the {fabric} fabric: " + "; ".join(problems),
            hint="without it NCCL falls back to TCP sockets; repair the node (or its image) "
            "and run again",
        )
        self.fabric = fabric
        self.problems = problems


class ContainerLimitError(GpufleetError):
    """The rank container cannot get the limits it needs (rootless podman, memlock)."""

    exit_code = ExitCode.NODE_FAILED

    def __init__(self, problems: list[str]):
        super().__init__(
            "the rank container cannot get its limits: " + "; ".join(problems),
            hint="run the runtime as root (or through sudo), or raise the user's hard memlock "
            "limit to unlimited (/etc/security/limits.conf: `<user> hard memlock unlimited`, "
            "then log in again)",
        )
        self.problems = problems


@dataclass(frozen=True)
class NodeFacts:
    """What a node's container needs to know about it, from probe_command's output."""

    runtime: str = ""  # docker | podman; "" when the node has neither
    runtime_version: str = ""
    sudo: bool = False  # the runtime is run through `sudo -n` (not root, not in its group)
    cdi: bool = False  # a CDI spec names nvidia.com/gpu and the engine reads CDI
    gpus: int = 0
    mem_bytes: int = 0
    uverbs: tuple[str, ...] = ()  # /dev/infiniband/uverbs*
    problems: tuple[str, ...] = field(default_factory=tuple)  # why no container can run here
    efa_uverbs: tuple[str, ...] = ()  # the uverbs devices whose driver is efa [do-eks63]
    rootless: bool = False  # the engine runs rootless: no host IPC namespace to join
    paths: tuple[str, ...] = ()  # which of _PROBED_PATHS and /opt/microsoft/*/topo.xml exist
    rxdm: bool = False  # the TCPX/TCPXO receive-datapath manager (RXDM_NAME) is running
    memlock_hard: str = ""  # `ulimit -H -l` of the probing user: "unlimited", KiB, "" unknown
    nofile_hard: str = ""  # `ulimit -H -n` of the probing user

    @property
    def prefix(self) -> list[str]:
        """The runtime's argv head: [sudo -n] docker|podman."""
        return (["sudo", "-n"] if self.sudo else []) + [self.runtime]

    @property
    def ipc_host(self) -> bool:
        """Whether the container can share the host's IPC namespace (not when rootless)."""
        return not self.rootless


# POSIX sh on the node: one line of JSON after PROBE_MARK. ORDER: docker first (as the NVIDIA
# container toolkit documents it), podman otherwise; one whose `info` fails (no daemon) is skipped.
# CDI: a spec naming nvidia.com/gpu [ctk-cdi], and for docker a daemon with CDI on (its `info`
# lists CDISpecDirs; an older or CDI-off daemon fails `--device nvidia.com/gpu=all`).
_PROBE = r"""rt=; why=
for c in ORDER; do
  command -v "$c" >/dev/null 2>&1 || { why="$why $c:missing"; continue; }
  s=; [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null && s="sudo -n"
  if $c info >/dev/null 2>&1; then rt=$c; s=; break; fi
  if [ -n "$s" ] && $s $c info >/dev/null 2>&1; then rt=$c; break; fi
  why="$why $c:info-failed"
done
sudo=false; [ -n "$rt" ] && [ -n "$s" ] && sudo=true
ver=; [ -n "$rt" ] && ver=$($rt --version 2>/dev/null | head -n1 | tr -d '"\\')
cdi=false
for f in /etc/cdi/*.yaml /etc/cdi/*.json /var/run/cdi/*.yaml /var/run/cdi/*.json; do
  [ -f "$f" ] && grep -q "nvidia.com/gpu" "$f" 2>/dev/null && cdi=true
done
rootless=false
if [ "$rt" = docker ]; then
  $s docker info --format '{{json .CDISpecDirs}}' 2>/dev/null | grep -q / || cdi=false
  $s docker info --format '{{json .SecurityOptions}}' 2>/dev/null | grep -q rootless &&
    rootless=true
elif [ "$rt" = podman ]; then
  r=$($s podman info --format '{{.Host.Security.Rootless}}' 2>/dev/null)
  [ "$r" = true ] && rootless=true
fi
gpus=$(ls /dev/nvidia[0-9]* 2>/dev/null | wc -l)
mem=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
uv=; efa=
for d in /dev/infiniband/uverbs*; do
  [ -e "$d" ] || continue
  uv="$uv $d"; l=$(readlink "/sys/class/infiniband_verbs/${d##*/}/device/driver" 2>/dev/null)
  [ "${l##*/}" = efa ] && efa="$efa $d"
done
paths=
for p in PATHS /opt/microsoft/*/topo.xml; do [ -e "$p" ] && paths="$paths $p"; done
rxdm=false
for c in docker podman; do
  command -v "$c" >/dev/null 2>&1 || continue
  for p in "" "sudo -n"; do
    [ "$($p $c inspect -f '{{.State.Running}}' RXDM 2>/dev/null)" = true ] && rxdm=true
  done
done
ml=$(ulimit -H -l 2>/dev/null); nf=$(ulimit -H -n 2>/dev/null)
f='"runtime":"%s","version":"%s","sudo":%s,"cdi":%s,"gpus":%s,"mem":%s,"uverbs":"%s","why":"%s"'
f="$f"',"efa":"%s","rootless":%s,"paths":"%s","rxdm":%s,"memlock":"%s","nofile":"%s"'
printf "MARK{$f}\\n" "$rt" "$ver" "$sudo" "$cdi" "${gpus:-0}" "${mem:-0}" "$uv" "$why" \
  "$efa" "$rootless" "$paths" "$rxdm" "$ml" "$nf"
"""


def probe_command(want: str = "auto") -> str:
    """The shell script that prints a node's NodeFacts (parse_probe reads it)."""
    order = "docker podman" if want == "auto" else want
    return (
        _PROBE.replace("ORDER", order)
        .replace("MARK", PROBE_MARK)
        .replace("PATHS", " ".join(_PROBED_PATHS))
        .replace("RXDM", RXDM_NAME)
    )


def parse_probe(text: str) -> NodeFacts:
    """probe_command's output -> NodeFacts; a node with no runtime says so in `problems`."""
    line = next((ln for ln in text.splitlines() if ln.startswith(PROBE_MARK)), None)
    if line is None:
        return NodeFacts(problems=("the container probe printed nothing",))
    doc = json.loads(line[len(PROBE_MARK) :])
    facts = NodeFacts(
        runtime=doc["runtime"],
        runtime_version=doc["version"],
        sudo=bool(doc["sudo"]),
        cdi=bool(doc["cdi"]),
        gpus=int(doc["gpus"]),
        mem_bytes=int(doc["mem"]),
        uverbs=tuple(doc["uverbs"].split()),
        efa_uverbs=tuple(doc.get("efa", "").split()),
        rootless=bool(doc.get("rootless", False)),
        paths=tuple(doc.get("paths", "").split()),
        rxdm=bool(doc.get("rxdm", False)),
        memlock_hard=str(doc.get("memlock", "")),
        nofile_hard=str(doc.get("nofile", "")),
    )
    if not facts.runtime:
        why = tuple(
            f"{rt}: {'not installed' if what == 'missing' else '`' + rt + ' info` failed'}"
            for rt, _, what in (w.partition(":") for w in doc.get("why", "").split())
        )
        return NodeFacts(mem_bytes=facts.mem_bytes, gpus=facts.gpus, problems=why)
    return facts


def shm_bytes(facts: NodeFacts) -> int:
    """/dev/shm when IPC cannot be the host's: min(1/3 of memory, 200 GB)."""
    return min(facts.mem_bytes // 3, SHM_CAP)


def gpu_flags(facts: NodeFacts) -> list[str]:
    """GPUs: CDI when the node has a spec the engine reads [ctk-cdi], else docker's --gpus.

    podman gets GPUs from CDI only: `--gpus all` without CDI gives it no devices [ctk-190], so
    a podman node without a spec is refused (fabric_problems) rather than started blind.
    """
    if not facts.gpus:
        return []
    return ["--device", "nvidia.com/gpu=all"] if facts.cdi else ["--gpus", "all"]


def gpu_problems(facts: NodeFacts) -> list[str]:
    """Why the container would not see the node's GPUs."""
    if facts.gpus and facts.runtime == "podman" and not facts.cdi:
        return [
            "podman reaches NVIDIA GPUs only through a CDI spec and the node has none "
            "(run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`)"
        ]
    return []


def limit_problems(facts: NodeFacts) -> list[str]:
    """Why `--ulimit memlock=-1:-1` would fail: a rootless engine and a finite hard memlock
    limit of the user [rootless] (unknown, "": not refused here)."""
    if facts.rootless and not facts.sudo and facts.memlock_hard not in ("", "unlimited"):
        return [
            f"the {facts.runtime} engine runs rootless and the user's hard memlock limit is "
            f"{facts.memlock_hard} KiB (`ulimit -H -l`), so `--ulimit memlock=-1:-1` fails"
        ]
    return []


def nofile(facts: NodeFacts) -> int:
    """The container's open-files limit: NOFILE [nofile], or the user's hard limit when a
    rootless engine cannot go above it."""
    if facts.rootless and facts.nofile_hard.isdigit():
        return min(NOFILE, int(facts.nofile_hard))
    return NOFILE


def fabric_problems(facts: NodeFacts, fabric: str, *, topo_file: str | None = None) -> list[str]:
    """What the node lacks for the fabric inside a container (empty: nothing)."""
    fabric_env.nccl_env(fabric)  # validates the name
    missing = []
    if fabric == "efa" and not facts.efa_uverbs:
        seen = f" (uverbs of other drivers: {', '.join(facts.uverbs)})" if facts.uverbs else ""
        missing.append(f"no EFA uverbs device on the node{seen}")
    elif fabric == "infiniband":
        if IB_DEVICES not in facts.paths:
            missing.append(f"no {IB_DEVICES} on the node")
        if topo_file and topo_file not in facts.paths:
            missing.append(f"the NCCL topology file {topo_file} is not on the node")
    elif fabric in ("tcpx", "tcpxo"):
        need = (TCPX_LIB, TCPX_SOCKETS) if fabric == "tcpx" else (TCPXO_LIB, APERTURE)
        missing += [f"no {p} on the node" for p in need if p not in facts.paths]
        if not facts.rxdm:
            missing.append(f"the receive-datapath manager ({RXDM_NAME}) is not running")
    return missing


def fabric_flags(facts: NodeFacts, fabric: str, *, topo_file: str | None = None) -> list[str]:
    """The devices, mounts and env the fabric needs in the container; raises when it cannot."""
    problems = fabric_problems(facts, fabric, topo_file=topo_file)
    if problems:
        raise ContainerFabricError(fabric, problems)
    argv: list[str] = []
    if fabric == "efa":
        # Only the EFA uverbs devices: a non-EFA verbs device in the container (all of
        # /dev/infiniband) disabled the EFA provider [do-eks63, lf12708]; EFA needs no rdma_cm.
        for dev in facts.efa_uverbs:
            argv += ["--device", dev]
    elif fabric == "infiniband":
        # Azure ND: every verbs device (uverbs*, rdma_cm) of the IB HCAs; the image's topology
        # file (catalog nccl_topo_file), read-only and named for NCCL, as /etc/nccl.conf does on
        # the node (reference/cloud-gpu-facts.md, Azure NCCL).
        argv += ["--device", IB_DEVICES]
        if topo_file:
            argv += ["-v", f"{topo_file}:{topo_file}:ro", "-e", f"NCCL_TOPO_FILE={topo_file}"]
    elif fabric == "tcpx":
        # The plugin (fabric.library_paths names it at the node's path) and the daemon's UNIX
        # sockets (NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx) [dstack].
        argv += ["-v", f"{TCPX_LIB}:{TCPX_LIB}:ro", "-v", f"{TCPX_SOCKETS}:{TCPX_SOCKETS}"]
    elif fabric == "tcpxo":
        # The plugin and the aperture devices (NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY) [dstack, ctk-a3].
        argv += ["-v", f"{TCPXO_LIB}:{TCPXO_LIB}:ro", "-v", f"{APERTURE}:{APERTURE}"]
        if FASTRAK_LIB in facts.paths:
            argv += ["-v", f"{FASTRAK_LIB}:{FASTRAK_LIB}:ro"]
    return argv


def run_argv(
    facts: NodeFacts,
    image: str,
    *,
    name: str,
    workdir: str,
    fabric: str = "none",
    mounts: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    command: tuple[str, ...] = ("sleep", "infinity"),
    topo_file: str | None = None,
    ipc_host: bool | None = None,
) -> list[str]:
    """The runtime's `run` argv for one node's rank container (the workdir at the same path).

    topo_file: the NCCL topology file of the type (catalog nccl_topo_file; infiniband);
    ipc_host: share the host's IPC namespace (default: unless the engine is rootless); without
    it /dev/shm gets shm_bytes. Raises ContainerFabricError when the node lacks the fabric's
    devices or files, GPU access included; ContainerLimitError when memlock cannot be raised.
    """
    if limit_problems(facts):
        raise ContainerLimitError(limit_problems(facts))
    if gpu_problems(facts):
        raise ContainerFabricError(fabric, gpu_problems(facts))
    argv = [*facts.prefix, "run", "--rm", "--name", name, "--init"]
    # Host network: NCCL, the rendezvous and the fabric see the node's own interfaces.
    argv += ["--network", "host"]
    if facts.ipc_host if ipc_host is None else ipc_host:
        argv += ["--ipc", "host"]
    else:  # a 64 MB default /dev/shm breaks NCCL's shared-memory transport and data loaders
        argv += ["--shm-size", str(shm_bytes(facts))]
    argv += ["--ulimit", "memlock=-1:-1", "--ulimit", f"stack={STACK_BYTES}:{STACK_BYTES}"]
    argv += ["--ulimit", f"nofile={nofile(facts)}:{nofile(facts)}"]
    argv += ["--cap-add", "IPC_LOCK"]
    argv += gpu_flags(facts)
    if GDRDRV in facts.paths:
        argv += ["--device", GDRDRV]
    if NCCL_CONF in facts.paths:  # the node's NCCL settings (Azure's, 50-nccl-env.sh's)
        argv += ["-v", f"{NCCL_CONF}:{NCCL_CONF}:ro"]
    argv += fabric_flags(facts, fabric, topo_file=topo_file)
    argv += ["-v", f"{workdir}:{workdir}", "-w", workdir]
    for m in mounts:
        argv += ["-v", m]
    for k, v in sorted((env or {}).items()):
        argv += ["-e", f"{k}={v}"]
    for k, v in sorted((labels or {}).items()):
        argv += ["--label", f"{k}={v}"]
    return [*argv, image, *command]


def run_command(facts: NodeFacts, image: str, **kw: object) -> str:
    """run_argv as one shell line."""
    return shlex.join(run_argv(facts, image, **kw))  # type: ignore[arg-type]


# Inside the rank container before the job: libfabric and aws-ofi-nccl in the image [efa-ctr],
# and as many EFA interfaces as the type has (catalog efa_interfaces). One interface is one
# RDM domain in `fi_info -p efa -t FI_EP_RDM` (a provider may list a domain more than once).
_EFA_CHECK = r"""fi=$(command -v fi_info || ls /opt/amazon/efa/bin/fi_info 2>/dev/null)
if [ -z "$fi" ]; then
  echo "MARK FAIL: fi_info is not in the image: it needs libfabric and aws-ofi-nccl" \
    "(AWS: efa_installer.sh --skip-kmod --skip-limit-conf --no-verify in the image;" \
    "for an NGC image add --enable-ngc, efa-installer >= 1.49)"
  exit 1
fi
plugin=
for d in DIRS; do ls "$d"/libnccl-net*.so >/dev/null 2>&1 && plugin="$d"; done
if [ -z "$plugin" ] && ldconfig -p 2>/dev/null | grep -q libnccl-net; then plugin=ldconfig; fi
if [ -z "$plugin" ]; then
  echo "MARK FAIL: aws-ofi-nccl (libnccl-net*.so) is not in the image: NCCL would use TCP" \
    "sockets (for an NGC image: efa_installer.sh --enable-ngc, efa-installer >= 1.49)"
  exit 1
fi
n=$("$fi" -p efa -t FI_EP_RDM 2>/dev/null | awk '$1 == "domain:" {print $2}' | sort -u | wc -l)
if [ "$n" -lt WANT ]; then
  echo "MARK FAIL: fi_info -p efa sees $n EFA interfaces in the container," \
    "the instance type has WANT: are its /dev/infiniband/uverbs* devices passed in?"
  exit 1
fi
echo "MARK ok: $n EFA interfaces (need WANT), aws-ofi-nccl in $plugin"
"""


def efa_check_command(expected_interfaces: int) -> str:
    """POSIX sh run in the rank container before the job: exit 1 with a reason when the image
    lacks libfabric/aws-ofi-nccl or fi_info sees fewer EFA interfaces than the type has."""
    dirs = " ".join(shlex.quote(d) for d in fabric_env.library_paths("efa"))
    return (
        _EFA_CHECK.replace("MARK", EFA_CHECK_MARK)
        .replace("WANT", str(int(expected_interfaces)))
        .replace("DIRS", dirs)
    )


def rxdm_argv(facts: NodeFacts, fabric: str, image: str) -> list[str]:
    """The TCPX/TCPXO receive-datapath manager's `run` argv (it must run before the ranks).

    As images/steps/40-fabric.sh starts it at boot, after dstack's gcp/features/tcpx.py and
    Cluster Toolkit's a3 blueprints: privileged, host network, the GPUs; TCPX serves its
    UNIX sockets in /run/tcpx.
    """
    if fabric not in ("tcpx", "tcpxo"):
        raise ValueError(f"fabric {fabric!r} has no receive-datapath manager")
    argv = [*facts.prefix, "run", "--detach", "--restart=always", "--name", RXDM_NAME]
    argv += ["--privileged", "--network", "host", *(gpu_flags(facts) or ["--gpus", "all"])]
    if fabric == "tcpx":
        argv += ["-v", f"{TCPX_SOCKETS}:{TCPX_SOCKETS}"]
        argv += ["--entrypoint", "/tcpgpudmarxd/build/app/tcpgpudmarxd", image]
        argv += ["--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd"]
        return [*argv, "--uds_path", TCPX_SOCKETS, "--setup_param", "--verbose 128 2 0"]
    argv += ["--entrypoint", "/fts/entrypoint_rxdm_container.sh", image]
    return [*argv, "--num_hops=2", "--num_nics=8", "--uid=", "--alsologtostderr"]
