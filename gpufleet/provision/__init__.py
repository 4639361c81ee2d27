"""Provisioners turn a ClusterSpec into a ClusterInfo and back to nothing; chosen by spec.cloud."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from gpufleet.core.providers import (  # noqa: F401  (re-exported: the table sits below remote/)
    DEFAULT_CLOUD,
    EXPIRY,
    HOST_KEY,
    LEASE,
    NODE_STATE,
    PROVIDERS,
    Provider,
    may_write,
    traits,
)

if TYPE_CHECKING:  # shell completion reads the registry: no pydantic at every TAB
    from gpufleet.components.clusterinfo import ClusterInfo
    from gpufleet.components.clusterspec import ClusterSpec

Progress = Callable[[str], None]


class Provisioner(Protocol):
    """What every provider implements (PROVIDERS names each one's class); ops calls only these."""

    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo:
        """Create (or, for `ssh`, record) the spec's machines and return the cluster's record,
        nodes reachable over SSH. Raises GpufleetError (a SpecError for a spec the provider
        refuses) with a fix; what it created before failing is its caller's to remove."""
        ...

    def down(self, info: ClusterInfo, progress: Progress) -> None:
        """Remove what `up` created (for `ssh`, only gpufleet's files in the workdirs); the
        record itself is its caller's to forget. Raises GpufleetError where it could not."""
        ...

    def extend(self, info: ClusterInfo, expires_at: float) -> None:
        """Move the nodes' hard expiry to `expires_at` (epoch seconds), on the nodes themselves;
        the record is its caller's to update. Raises a GpufleetError with a fix and its exit
        code: before changing anything where it cannot (HostsNotOurs: hosts the user owns;
        ExtendRefused: the cloud removes them sooner), ExtendFailed where a node missed it."""
        ...

    def status(self, info: ClusterInfo) -> dict[str, str]:
        """Node name -> a short state word (running, stopped, gone, ...); changes nothing."""
        ...

    def replace(self, info: ClusterInfo, nodes: list[str], progress: Progress) -> ClusterInfo:
        """Make new machines for `nodes` (names in info) in their place: same name and index,
        same placement; the old ones are removed first where they still exist, nothing else is
        touched (on Pulumi: only those nodes' resources are replaced). Returns the cluster's
        new record (new host keys, addresses), saved, the new nodes reachable over SSH.
        Only where traits(cloud).replaces; raises GpufleetError with a fix where it failed."""
        ...


def for_cloud(cloud: str, **options: object) -> Provisioner:
    """The provisioner for a cloud: the one place that picks by cloud name (PROVIDERS)."""
    p = traits(cloud)
    cls = getattr(importlib.import_module(p.module), p.cls)
    return cls(**options) if p.takes_options else cls()
