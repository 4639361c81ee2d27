"""`sweep`: remove what no live gpufleet owns: dead runs' clusters, damaged records, stacks."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.clusters import ops
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError, StateDamaged
from gpufleet.provision import Progress


def leftover_clusters() -> list[tuple[str, str]]:
    """(name, why) of each recorded cluster no live gpufleet owns: its `run` is dead or its
    record is damaged. One being created right now is not a leftover."""
    found = []
    for name in state.names():
        if state.locked(name):
            continue
        why = None
        if state.orphaned(name):
            why = "its `run` is dead"
        else:
            try:
                state.load(name)
            except StateDamaged:
                why = "its record is damaged"
        if why:
            found.append((name, why))
    return found


def sweep(
    progress: Progress,
    *,
    dry_run: bool = False,
    yes: bool = False,
    backend: str | None = None,
    confirm: Callable[[str], object] | None = None,
) -> int:
    """Remove (with dry_run: only list) every leftover; how many kinds were found, 0 for none.

    Cloud stacks are destroyed only with `yes`, or after `confirm(question)` returns (it
    raises to refuse); with neither, a GpufleetError names the flags.
    """
    from gpufleet.provision.localprocs import stray_processes, terminate

    found = 0
    handled = set()
    for name, why in leftover_clusters():
        found += 1
        handled.add(name)
        progress(f"{name}: {why}" + ("" if dry_run else ": removing"))
        if not dry_run:
            ops.destroy_name(name, progress)
    strays = stray_processes()
    if strays:
        found += 1
        progress(
            f"{len(strays)} sandbox processes of removed clusters"
            + ("" if dry_run else ": stopping")
        )
        if not dry_run:
            terminate(strays)
    return found + _sweep_stacks(progress, backend, dry_run, yes, confirm, skip=handled)


def _sweep_stacks(
    progress: Progress,
    backend: str | None,
    dry_run: bool,
    yes: bool,
    confirm: Callable[[str], object] | None,
    skip: set[str],
) -> int:
    """The cloud half of `sweep`: stale stacks in the backend; how many were found."""
    from gpufleet.provision import pulumi

    if not pulumi.may_hold_stacks(backend):
        return 0  # an empty file backend: no Pulumi CLI needed to know there is nothing
    stale = [
        (s, why)
        for s, why in ops.stale_stacks(
            pulumi.list_stacks(backend), time.time(), shared=pulumi.is_shared(backend)
        )
        if s.cluster not in skip
    ]
    for s, why in stale:
        progress(f"stack {s.stack} (cluster {s.cluster}): {why}")
    if not stale or dry_run:
        return len(stale)
    if not yes:
        if confirm is None:
            raise GpufleetError(
                f"{len(stale)} cloud stacks to destroy; not asked on a non-terminal",
                hint="pass --yes to remove them, or --dry-run to only list them",
                exit_code=ExitCode.USAGE,  # a flag is missing
            )
        confirm(f"destroy {len(stale)} cloud stacks?")
    for s, _why in stale:
        ops.remove_stack(s, backend, progress)
    return len(stale)
