"""gpufleet's errors: the root lives in components (shared), the runtime ones here."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.components.errors import CatalogError, GpufleetError, MissingExtra, SpecError
from gpufleet.components.exitcodes import ExitCode

__all__ = [
    "CatalogError",
    "ClientLimit",
    "ClusterExists",
    "ClusterExpired",
    "ClusterNotFound",
    "ConnectionClosed",
    "ExtendFailed",
    "ExtendRefused",
    "GpufleetError",
    "GroupError",
    "HostKeyMismatch",
    "HostsNotOurs",
    "JobFailed",
    "MissingExtra",
    "MissingTool",
    "NodeExpired",
    "NodeLost",
    "NodeRefused",
    "SpecError",
    "SSHUnreachable",
    "StateDamaged",
    "SyncFailed",
]


class ClusterNotFound(GpufleetError):
    exit_code = ExitCode.USAGE

    def __init__(self, name: str):
        super().__init__(f"no cluster named {name!r}", hint="`gpufleet list` shows the clusters")
        self.name = name


class ClusterExpired(ClusterNotFound):
    """The cluster reached its expiry and removed itself; its record is gone, a note stays."""

    def __init__(self, name: str, expired_at: float):
        import time

        GpufleetError.__init__(
            self,
            f"cluster {name!r} expired at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z', time.localtime(expired_at))}"
            " and removed itself",
            hint=f"create it again (`gpufleet up --name {name}`); keep one longer with --ttl",
        )
        self.name = name
        self.expired_at = expired_at


class ClusterExists(GpufleetError):
    exit_code = ExitCode.USAGE

    def __init__(self, name: str):
        super().__init__(
            f"a cluster named {name!r} already exists",
            hint=f"reuse it with --cluster {name}, or remove it with `gpufleet down {name}`",
        )
        self.name = name


class ClientLimit(GpufleetError):
    """This machine's process limit (`limit`: RLIMIT_NOFILE, RLIMIT_NPROC) is below what
    `nodes` need (`need`), even raised to its hard limit (`have`); nothing was started."""

    exit_code = ExitCode.USAGE

    def __init__(self, limit: str, nodes: int, need: int, have: int, hint: str):
        super().__init__(
            f"{nodes} nodes need about {need} of {limit}; this process may have {have}",
            hint=hint,
        )
        self.limit = limit
        self.nodes = nodes
        self.need = need
        self.have = have


class ClusterBusy(GpufleetError):
    """Another gpufleet process holds the cluster name's lock (it is being created)."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str):
        super().__init__(
            f"cluster {name!r} is being created by another gpufleet process",
            hint="wait for it, pick another --name, or `gpufleet down` it if that process died",
        )
        self.name = name


class StateDamaged(GpufleetError):
    """A cluster's state file is missing, truncated or not what gpufleet wrote."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, path: str, why: str):
        super().__init__(f"the state of cluster {name!r} is damaged ({path}: {why})")
        self.hint = (
            f"`gpufleet down {name}` still stops its processes and removes its files"
            " (`gpufleet sweep` finds such clusters)"
        )
        self.name = name
        self.path = path
        self.why = why


class MissingTool(GpufleetError):
    """A program gpufleet drives (sshd, pulumi, ...) is not installed."""

    exit_code = ExitCode.USAGE

    def __init__(self, tool: str, install: str):
        super().__init__(f"{tool} is not installed or not on PATH", hint=install)
        self.tool = tool
        self.install = install


class HostKeyMismatch(GpufleetError):
    """A node presented a host key other than the pinned one: refused, never trusted."""

    exit_code = ExitCode.HOST_KEY

    def __init__(self, node: str, address: str, expected: str | None, got: str):
        what = (
            f"presented host key {got}, but known_hosts pins {expected}"
            if expected
            else f"presented host key {got}, and known_hosts has no key for it"
        )
        super().__init__(
            f"{node} ({address}) {what}: connection refused",
            hint="the node may have been replaced or the address taken over; "
            "re-create the cluster rather than trusting a new key",
        )
        self.node = node
        self.address = address
        self.expected = expected
        self.got = got


class SSHUnreachable(GpufleetError):
    exit_code = ExitCode.UNREACHABLE

    def __init__(self, failures: dict[str, str], waited: float):
        listed = "; ".join(f"{n}: {why}" for n, why in failures.items())
        super().__init__(f"SSH not reachable after {waited:.0f}s on {listed}")
        self.failures = failures
        self.waited = waited


class ConnectionClosed(GpufleetError):
    """An SSH connection (or the group holding it) closed under a command: paramiko's and
    Group's EOFError, which click would otherwise end with a bare 'Aborted!'."""

    exit_code = ExitCode.UNREACHABLE

    def __init__(self, cause: BaseException):
        why = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        super().__init__(
            f"an SSH connection closed while gpufleet was using it ({why})",
            hint="check the nodes with `gpufleet status`, then run again; --debug shows where",
        )
        self.why = why


@dataclass
class HostResult:
    """What one node returned for one group command."""

    node: str
    exit_code: int | None  # None: no exit status (connection lost, cancelled)
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # client-side failure (SSH, timeout)
    started: float = 0.0
    finished: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


class GroupError(GpufleetError):
    """At least one node failed a group command; carries every node's result.

    Exits JOB_FAILED whatever the nodes' codes: a node's code is in the message and results.
    """

    exit_code = ExitCode.JOB_FAILED

    def __init__(self, what: str, results: dict[str, HostResult]):
        failed = [r for r in results.values() if not r.ok]
        first = min(failed, key=lambda r: r.finished) if failed else None
        parts = []
        for r in failed:
            why = r.error or f"exit {r.exit_code}"
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] if not r.error else []
            parts.append(f"{r.node}: {why}" + (f" ({tail[0][:200]})" if tail else ""))
        summary = f"{what} failed on {len(failed)}/{len(results)} nodes: "
        super().__init__(summary + "; ".join(parts))
        self.results = results
        self.first_failed = first.node if first else None
        self.first_code = first.exit_code if first else None


class JobFailed(GpufleetError):
    """The distributed job ended with a non-zero code; names the node that failed first.

    gpufleet exits JOB_FAILED; the job's own code (`code`) is in the message and run's record.
    """

    exit_code = ExitCode.JOB_FAILED

    def __init__(self, node: str, code: int, detail: str = ""):
        extra = f" ({detail})" if detail else ""
        super().__init__(f"job failed: {node} exited {code} first{extra}")
        self.node = node
        self.code = code


class NodeLost(GpufleetError):
    """A node stopped answering (killed, hung, partitioned) while a job ran on it."""

    exit_code = ExitCode.NODE_FAILED

    def __init__(
        self,
        node: str,
        why: str,
        *,
        whys: dict[str, str] | None = None,
        at: float | None = None,
    ):
        super().__init__(
            f"{node} lost: {why}; the job was stopped on the other nodes",
            hint="the node may be gone or unreachable; check `gpufleet status`, "
            "then `gpufleet down` and re-create the cluster",
        )
        self.node = node
        self.why = why
        self.whys = whys or {node: why}  # every node lost with it (node -> why)
        self.at = at  # when the first went (epoch seconds), if known

    @property
    def nodes(self) -> list[str]:
        return sorted(self.whys)


class NodeExpired(GpufleetError):
    """A node removed itself at its TTL or lease while the job ran."""

    exit_code = ExitCode.NODE_EXPIRED

    def __init__(self, node: str, when: str):
        super().__init__(f"{node} reached its expiry at {when} and removed itself")
        self.hint = "give the run a longer --max-duration, or `gpufleet extend` a kept cluster"
        self.node = node
        self.when = when


class NodeRefused(GpufleetError):
    """An existing cluster's node refuses SSH connections: its sshd (or the node) is gone."""

    exit_code = ExitCode.UNREACHABLE

    def __init__(self, cluster: str, nodes: list[str]):
        super().__init__(f"{', '.join(nodes)} of cluster {cluster!r} refused the SSH connection")
        self.hint = (
            f"the node is not running any more: `gpufleet down {cluster}` and create it again"
        )
        self.cluster = cluster
        self.nodes = nodes


class SyncFailed(GpufleetError):
    """rsync could not copy the working directory to a node; carries its exit code and output."""

    exit_code = ExitCode.OPERATION_FAILED

    def __init__(self, node: str, code: int, detail: str):
        super().__init__(
            f"sync to {node} failed (rsync exit {code}): {detail}",
            hint="check the node's disk space and that its workdir is writable; "
            "`--sync-method paramiko` copies without rsync",
        )
        self.node, self.code, self.detail = node, code, detail


class ExtendRefused(GpufleetError):
    """The cloud cannot keep the cluster past `latest`; raised before anything changed."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, latest: float, problem: str, fix: str):
        super().__init__(f"cannot extend {name!r}: {problem}", hint=fix)
        self.name = name
        self.latest = latest


class ExtendFailed(GpufleetError):
    """Some nodes did not take the new expiry (node -> why); the record keeps the old one."""

    def __init__(self, name: str, failed: dict[str, str]):
        detail = "; ".join(f"{n}: {why}" for n, why in sorted(failed.items()))
        super().__init__(
            f"the new expiry of {name!r} did not reach {len(failed)} node(s): {detail}",
            hint=f"run `gpufleet extend {name} ...` again; a node not reached keeps its old expiry",
        )
        self.name = name
        self.failed = failed


class HostsNotOurs(GpufleetError):
    """A write gpufleet refuses on machines it did not create (the provider's `may_write`)."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, cloud: str, what: str):
        super().__init__(
            f"cluster {name!r} (cloud={cloud}) is hosts you own, not machines gpufleet "
            f"created: it writes no {what} there",
            hint="nothing of gpufleet expires on your own hosts; `gpufleet down` only forgets them",
        )
        self.name, self.cloud, self.what = name, cloud, what


class CannotReplace(GpufleetError):
    """A lost node on a provider that cannot make another (traits(cloud).replaces is False)."""

    exit_code = ExitCode.USAGE

    def __init__(self, name: str, cloud: str, nodes: list[str]):
        super().__init__(
            f"cluster {name!r} (cloud={cloud}) cannot replace {', '.join(nodes)}: its machines "
            "are yours, gpufleet makes no other",
            hint="bring the host back and use --recover-mode restart, or --recover-mode none",
        )
        self.name, self.cloud, self.nodes = name, cloud, nodes
