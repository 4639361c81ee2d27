"""Provisioners turn a ClusterSpec into a ClusterInfo and back to nothing; chosen by spec.cloud."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gpufleet.components.spec import ClusterInfo, ClusterSpec

Progress = Callable[[str], None]


class Provisioner(Protocol):
    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo: ...

    def down(self, info: ClusterInfo, progress: Progress) -> None: ...

    def status(self, info: ClusterInfo) -> dict[str, str]:
        """Node name -> a short state word (running, stopped, gone, ...)."""
        ...


def for_cloud(cloud: str, **options: object) -> Provisioner:
    """The provisioner for a cloud: the one place that picks by cloud name."""
    if cloud == "local":
        from gpufleet.provision.local import LocalProvisioner

        return LocalProvisioner()
    if cloud == "vm":
        from gpufleet.provision.vm import VmProvisioner

        return VmProvisioner(**options)  # type: ignore[arg-type]
    if cloud == "ssh":
        from gpufleet.provision.ssh import SSHProvisioner

        return SSHProvisioner(**options)  # type: ignore[arg-type]
    if cloud in ("aws", "gcp", "azure"):
        from gpufleet.provision.pulumi import PulumiProvisioner

        return PulumiProvisioner(**options)  # type: ignore[arg-type]
    from gpufleet.errors import GpufleetError

    raise GpufleetError(
        f"cloud {cloud!r} has no provisioner yet", hint="use --cloud local", exit_code=2
    )
