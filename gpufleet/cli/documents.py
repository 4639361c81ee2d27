"""The --json documents: one versioned shape per output, the same node object everywhere."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import ClusterInfo

SCHEMA_VERSION = 1
# A kind whose shape changed other than by new fields: its version (gpufleet/schemas/).
# cluster, cluster-list 2: one vocabulary of cluster states (CLUSTER_STATES) in list, status
# and up, where 1 said "ready" (up), "recorded" (list, status) and "being created".
SCHEMA_VERSIONS = {"cluster": 2, "cluster-list": 2}

# Every cluster state list, status, up and their --json say, and what it means.
CLUSTER_STATES = {
    "creating": "its `up` or `run` is creating it now",
    "running": "every node answered (`status`), or its record is live (`list` asks no node)",
    "degraded": "some of its nodes are not running (`status`)",
    "stopped": "none of its nodes is running (`status`)",
    "expired": "past its expiry: its nodes removed, or are removing, themselves",
    "orphaned": "the `run` that made it is dead; `gpufleet sweep` removes it",
    "damaged": "its record is unreadable; `gpufleet down` still removes it",
}
# the node states, as providers report them, that count as a node up
UP_NODE_STATES = ("running", "reachable", "in stack")


def envelope(kind: str, **fields: Any) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSIONS.get(kind, SCHEMA_VERSION), "kind": kind, **fields}


def cluster_state(
    *,
    readable: bool,
    creating: bool = False,
    orphaned: bool = False,
    expires_at: float | None = None,
    node_states: dict[str, str] | None = None,
    now: float | None = None,
) -> str:
    """The cluster's state in CLUSTER_STATES; node_states None: no node was asked (list)."""
    if not readable:
        return "creating" if creating else "damaged"
    if orphaned:
        return "orphaned"
    if expires_at is not None and expires_at < (time.time() if now is None else now):
        return "expired"
    if node_states is None:
        return "running"
    up = [s in UP_NODE_STATES for s in node_states.values()]
    if all(up):
        return "running"
    return "degraded" if any(up) else "stopped"


def node(n: Any, state: str = "unknown") -> dict[str, Any]:
    """The node object of every document (node.schema.json)."""
    return {
        "name": n.name,
        "state": state,
        "public_ip": n.public_ip,
        "private_ip": n.private_ip,
        "ssh_port": n.ssh_port,
        "gpus": n.gpus,
    }


def iso(epoch: float | None) -> str | None:
    """Epoch seconds -> local ISO 8601 with its UTC offset, as tables show it."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(epoch))


def cluster(
    info: ClusterInfo,
    states: dict[str, str] | None = None,
    *,
    state: str = "running",
    usd_per_hour: float | None = None,
    region: str | None = None,
) -> dict[str, Any]:
    """A cluster (cluster.schema.json): `up`, `status`, and each entry of `list`."""
    states = states or {}
    return {
        "name": info.name,
        "cloud": info.cloud,
        "state": state,
        "instance_type": info.instance_type,
        "region": region,
        "fabric": info.fabric,
        "created_at": info.created_at,
        "expires_at": info.expires_at,
        "expires_at_local": iso(info.expires_at),
        "usd_per_hour": usd_per_hour,
        "nodes": [node(n, states.get(n.name, "unknown")) for n in info.nodes],
    }


def incomplete(name: str) -> dict[str, Any]:
    """A cluster whose record cannot be read (being created, or left half-made)."""
    return {
        "name": name,
        "cloud": None,
        "state": "damaged",
        "instance_type": None,
        "region": None,
        "fabric": None,
        "created_at": None,
        "expires_at": None,
        "expires_at_local": None,
        "usd_per_hour": None,
        "nodes": [],
    }


def run(
    record: Any, *, created: bool, instance_type: str | None, image: str | None = None
) -> dict[str, Any]:
    """`run --json` (run.schema.json): the run's record as `runs --json` lists it, and what
    only `run` knows: whether it created the cluster, the instance type, and the container
    image its ranks ran in (None: none) with each node's digest of it (the record's, if any),
    and the run's recoveries (the timeline; [] without one)."""
    fields = record.as_dict()
    fields["image"] = fields.get("image") or image
    fields["digests"] = dict(fields.get("digests") or {})
    return envelope("run", **fields, created=created, instance_type=instance_type)


def run_list(records: list[Any]) -> dict[str, Any]:
    """`runs` (run-list.schema.json): every recorded run, oldest first."""
    return envelope("run-list", runs=[r.as_dict() for r in records])


def sync(cluster: str, report: Any, node_order: list[str]) -> dict[str, Any]:
    """`sync` (sync.schema.json): how it copied, what this machine sent, what each worker got."""
    rank = {n: i for i, n in enumerate(node_order)}
    workers = sorted(report.per_node.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    return envelope(
        "sync",
        cluster=cluster,
        method=report.method,
        files=report.files,
        size=report.size,
        skipped=sorted(report.skipped),
        uploaded=report.uploaded,
        seconds=report.seconds,
        workers=[{"name": n, "bytes": b} for n, b in workers],
    )
