"""A new cluster's life below the CLI: create it, wait for SSH, and remove it if it fails."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gpufleet.clusters import cost, ops
from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core.errors import GpufleetError
from gpufleet.core.signals import raise_pending, shielded
from gpufleet.provision import Progress, traits
from gpufleet.remote import Group


def wait_ready(
    group: Group, progress: Progress, timeout: float | None = None, *, refused_fails=False
) -> None:
    """Until every node answers SSH: `timeout` seconds, or as long as its provider says."""
    if timeout is None:
        timeout = traits(group.info.cloud).ssh_wait_s
    group.wait_ready(timeout, refused_fails=refused_fails, progress=progress)


def up(
    spec: ClusterSpec, progress: Progress, *, max_cost: float | None = None, **options: Any
) -> ClusterInfo:
    """`gpufleet up`: a cluster whose every node answers SSH. Refused before anything exists
    when its cost at TTL is over max_cost (USD); a failure or Ctrl-C before SSH answers
    removes what was created."""
    cost.check_budget(cost.estimate(spec), max_cost)
    started = time.monotonic()
    progress(f"creating {spec.nodes} {spec.cloud} nodes for cluster {spec.name}")
    info = ops.create(spec, progress, **options)
    try:
        with Group(info) as g:
            wait_ready(g, progress)
    except BaseException:
        with shielded():  # a second signal abandons the rollback; one more is remembered
            progress("nodes unreachable: removing what was created")
            ops.destroy(info, progress, **options)
        raise_pending()
        raise
    progress(f"cluster {spec.name} ready in {time.monotonic() - started:.1f}s")
    return info


def _saved(info: ClusterInfo) -> ClusterInfo:
    """The cluster as last saved: a recovery's replacements (new nodes, new ids) included."""
    from gpufleet.core import state

    try:
        return state.load(info.name) if state.known(info.name) else info
    except GpufleetError:
        return info


@contextmanager
def for_run(
    spec: ClusterSpec, progress: Progress, *, keep: bool = False, **options: object
) -> Iterator[ClusterInfo]:
    """A cluster for the length of a `with` (one-shot `run`): removed when it ends, whatever
    ended it, unless kept. Until then this process owns it: `gpufleet sweep` removes it if
    the process dies."""
    progress(f"creating {spec.nodes} {spec.cloud} nodes ({spec.name})")
    info = ops.create(spec, progress, owner=None if keep else os.getpid(), **options)
    try:
        yield info
    finally:
        with shielded():
            if keep:
                progress(f"kept cluster {info.name}: remove it with `gpufleet down {info.name}`")
            else:
                progress(f"tearing down {info.name}")
                try:
                    ops.destroy(_saved(info), progress, **options)
                except GpufleetError as e:
                    progress(f"teardown failed: {e}; run `gpufleet down {info.name}`")
                    raise
        raise_pending()  # a signal during the teardown ends the caller with its code
