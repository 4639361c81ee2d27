"""The runtime command line of a node's rank container: pure, per runtime and fabric."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

RUNTIMES = ("docker", "podman")
GIB = 1024**3
SHM_CAP = 200 * GIB  # with IPC not shared: min(1/3 of memory, 200 GB)
STACK_BYTES = 64 * 1024 * 1024  # `ulimit -s`: 64 MiB, NVIDIA's container recommendation
PROBE_MARK = "gpufleet-container-probe:"


@dataclass(frozen=True)
class NodeFacts:
    """What a node's container needs to know about it, from probe_command's output."""

    runtime: str = ""  # docker | podman; "" when the node has neither
    runtime_version: str = ""
    sudo: bool = False  # the runtime is run through `sudo -n` (not root, not in its group)
    cdi: bool = False  # a CDI spec names nvidia.com/gpu (nvidia-ctk cdi generate)
    gpus: int = 0
    mem_bytes: int = 0
    uverbs: tuple[str, ...] = ()  # /dev/infiniband/uverbs*
    problems: tuple[str, ...] = field(default_factory=tuple)  # why no container can run here

    @property
    def prefix(self) -> list[str]:
        """The runtime's argv head: [sudo -n] docker|podman."""
        return (["sudo", "-n"] if self.sudo else []) + [self.runtime]


# POSIX sh on the node: one line of JSON after PROBE_MARK. ORDER: docker first (as the NVIDIA
# container toolkit documents it), podman otherwise; one whose `info` fails (no daemon) is skipped.
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
gpus=$(ls /dev/nvidia[0-9]* 2>/dev/null | wc -l)
mem=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
uv=$(ls /dev/infiniband/uverbs* 2>/dev/null | tr '\n' ' ')
f='"runtime":"%s","version":"%s","sudo":%s,"cdi":%s,"gpus":%s,"mem":%s,"uverbs":"%s","why":"%s"'
printf "MARK{$f}\\n" "$rt" "$ver" "$sudo" "$cdi" "${gpus:-0}" "${mem:-0}" "$uv" "$why"
"""


def probe_command(want: str = "auto") -> str:
    """The shell script that prints a node's NodeFacts (parse_probe reads it)."""
    order = "docker podman" if want == "auto" else want
    return _PROBE.replace("ORDER", order).replace("MARK", PROBE_MARK)


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
) -> list[str]:
    """The runtime's `run` argv for one node's rank container (the workdir at the same path)."""
    argv = [*facts.prefix, "run", "--rm", "--name", name, "--init"]
    # Host network: NCCL, the rendezvous and the fabric see the node's own interfaces.
    argv += ["--network", "host", "--ipc", "host"]
    argv += ["--ulimit", "memlock=-1:-1", "--ulimit", f"stack={STACK_BYTES}:{STACK_BYTES}"]
    argv += ["--cap-add", "IPC_LOCK"]
    if facts.gpus:
        argv += ["--device", "nvidia.com/gpu=all"] if facts.cdi else ["--gpus", "all"]
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
