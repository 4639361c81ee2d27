"""Provisioners turn a ClusterSpec into a ClusterInfo and back to nothing; chosen by spec.cloud."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol

from gpufleet.components.exitcodes import ExitCode
from gpufleet.components.spec import ClusterInfo, ClusterSpec
from gpufleet.core.providers import (  # noqa: F401  (re-exported: the table sits below remote/)
    EXPIRY,
    HOST_KEY,
    LEASE,
    NODE_STATE,
    PROVIDERS,
    Provider,
    may_write,
)

Progress = Callable[[str], None]


class Provisioner(Protocol):
    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo: ...

    def down(self, info: ClusterInfo, progress: Progress) -> None: ...

    def status(self, info: ClusterInfo) -> dict[str, str]:
        """Node name -> a short state word (running, stopped, gone, ...)."""
        ...


def for_cloud(cloud: str, **options: object) -> Provisioner:
    """The provisioner for a cloud: the one place that picks by cloud name (PROVIDERS)."""
    p = PROVIDERS.get(cloud)
    if p is None:
        from gpufleet.core.errors import GpufleetError

        raise GpufleetError(
            f"cloud {cloud!r} has no provisioner yet",
            hint="use --cloud local",
            exit_code=ExitCode.USAGE,
        )
    cls = getattr(importlib.import_module(p.module), p.cls)
    return cls(**options) if p.takes_options else cls()
