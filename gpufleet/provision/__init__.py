"""Provisioners turn a ClusterSpec into a ClusterInfo and back to nothing; chosen by spec.cloud."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.exitcodes import ExitCode

Progress = Callable[[str], None]

# What gpufleet can write on a machine outside a run's workdir. The node state files can remove
# the machine (its own expiry reads them: images/ttl/gpufleet-expire, the sandbox watchdog);
# the host key is sshd's own, replaced on first contact (remote/hostkeys.py).
LEASE = "lease"  # a live `run` renews it; the node removes itself when it lapses
EXPIRY = "expires_at"  # `extend`'s new hard expiry
HOST_KEY = "host_key"  # the bootstrap host key from user data, replaced by one made there
NODE_STATE = frozenset({LEASE, EXPIRY, HOST_KEY})


class Provisioner(Protocol):
    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo: ...

    def down(self, info: ClusterInfo, progress: Progress) -> None: ...

    def status(self, info: ClusterInfo) -> dict[str, str]:
        """Node name -> a short state word (running, stopped, gone, ...)."""
        ...


@dataclass(frozen=True)
class Provider:
    """A provider's entry: where its provisioner lives and what gpufleet may write on its
    machines outside a run's workdir.

    The rule: gpufleet never leaves on a machine it did not create anything that can remove,
    stop or change it, so a provider of machines the user already has (`ssh`) declares
    `may_write` empty. Without a lease there, a dead CLI's commands stop with their SSH
    session instead (remote/group.py, wrap_command).
    """

    module: str
    cls: str
    may_write: frozenset[str]
    takes_options: bool = True


PROVIDERS: dict[str, Provider] = {
    "local": Provider("gpufleet.provision.local", "LocalProvisioner", NODE_STATE, False),
    "vm": Provider("gpufleet.provision.vm", "VmProvisioner", NODE_STATE),
    "ssh": Provider("gpufleet.provision.ssh", "SSHProvisioner", frozenset()),
    **{
        c: Provider("gpufleet.provision.pulumi", "PulumiProvisioner", NODE_STATE)
        for c in ("aws", "gcp", "azure")
    },
}


def may_write(cloud: str) -> frozenset[str]:
    """What gpufleet may write on this cloud's machines outside a workdir; none if unknown."""
    p = PROVIDERS.get(cloud)
    return p.may_write if p else frozenset()


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
