"""Create and destroy clusters: spec -> provisioner -> saved ClusterInfo, and back."""

from __future__ import annotations

import contextlib
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

from gpufleet.components.clusterinfo import ClusterInfo
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core import state
from gpufleet.core.errors import (
    ClusterBusy,
    ClusterExists,
    HostsNotOurs,
    StateDamaged,
)
from gpufleet.core.signals import shielded
from gpufleet.provision import Progress, for_cloud, traits
from gpufleet.remote import sshconfig

if TYPE_CHECKING:
    from gpufleet.provision.pulumi import StackRecord


def create(
    spec: ClusterSpec, progress: Progress, *, owner: int | None = None, **options: object
) -> ClusterInfo:
    """Provision a validated spec and record it; a failed create leaves nothing behind.

    owner: the PID of a CLI that will remove the cluster itself (`run`); recorded first, so
    `gpufleet sweep` can tell an orphan from a cluster kept on purpose.
    """
    from gpufleet.core import limits

    limits.ensure(spec.nodes)  # this machine's fds and threads for them: refused before any is made
    with state.lock(spec.name):  # two creates of one name: the second is refused at once
        if state.known(spec.name):
            raise ClusterExists(spec.name)
        provisioner = for_cloud(spec.cloud, **options)
        info: ClusterInfo | None = None
        try:
            if owner is not None:
                state.set_owner(spec.name, owner)
            info = provisioner.up(spec, progress)
            state.save_spec(spec)
            state.save(info)
            write_ssh_config(info)
            return info
        except BaseException:
            # a failure or a signal anywhere in here: nothing of this cluster may remain
            with shielded():
                if info is not None:
                    provisioner.down(info, progress)
                    state.forget(spec.name)
                elif not state.exists(spec.name):  # the provisioner removed what it made
                    state.forget(spec.name)
            raise


write_ssh_config = sshconfig.write


def destroy(info: ClusterInfo, progress: Progress, **options: object) -> None:
    """Remove every resource of a cluster, then its record; an adopted one (`attach`) only
    forgets its record: its stack is its owner's to destroy."""
    from gpufleet.clusters import attach
    from gpufleet.remote import head, holder

    if attach.is_adopted(info):
        attach.release(info, progress)
        return
    holder.stop(info.name)
    head.stop_mux(info)
    for_cloud(info.cloud, **options).down(info, progress)
    state.forget(info.name, removed=True)


def destroy_name(name: str, progress: Progress, **options: object) -> bool:
    """Remove a cluster by name, also from a damaged record; False: nothing was there."""
    if not state.known(name):
        return False
    if state.locked(name):
        raise ClusterBusy(name)
    try:
        info = state.load(name)
    except StateDamaged as e:
        progress(f"{e}: removing it by its folder")
        _destroy_damaged(name, progress, **options)
        return True
    destroy(info, progress, **options)
    return True


def _destroy_damaged(name: str, progress: Progress, **options: object) -> None:
    """No readable ClusterInfo: stop what the folder names, destroy the stack, remove files."""
    from gpufleet.provision.localprocs import stop_by_folder

    spec = None
    try:
        spec = state.load_spec(name)
    except Exception:
        progress(f"{name}: spec.json unreadable too; assuming a sandbox cluster")
    # processes whose command line names the folder (sandbox sshd, watchdog): always safe
    stop_by_folder(name)
    if spec is not None and traits(spec.cloud).pulumi:  # its stack, destroyed by name
        stub = SimpleNamespace(name=name, provider={}, nodes=[])
        for_cloud(spec.cloud, **options).down(stub, progress)  # type: ignore[arg-type]
    state.forget(name, removed=True)


def extend(name: str, minutes: int) -> float:
    """Move a cluster's hard expiry to `minutes` from now; the new epoch seconds."""
    from gpufleet.clusters import attach

    info = state.load(name)
    if not traits(info.cloud).can_extend:
        raise HostsNotOurs(name, info.cloud, "expiry")  # hosts the user has: none to move
    if attach.is_adopted(info):  # its nodes are its stack's: gpufleet writes nothing there
        raise attach.ExtendAdopted(info)
    expires_at = time.time() + minutes * 60
    for_cloud(info.cloud).extend(info, expires_at)
    # reloaded: first contact with the nodes may have rotated their host keys in the record
    state.save(state.load(name).model_copy(update={"expires_at": expires_at}))
    return expires_at


def node_states(info: ClusterInfo) -> dict[str, str]:
    """Node name -> what its provisioner says of it (running, stopped, gone, ...); changes
    nothing."""
    return for_cloud(info.cloud).status(info)


def stale_stacks(
    stacks: list[StackRecord], now: float, *, shared: bool = False
) -> list[tuple[StackRecord, str]]:
    """The cloud stacks `sweep` removes, each with why: past its expiry, or no live CLI owns
    its cluster here (no record, or the `run` that owns it is dead). An image bake's stack
    (its gpufleet_kind output is "bake"; never its name: a cluster's name may end in -image
    in records made before the spec refused it) is stale once no `gpufleet image bake` here
    holds its name: a live one removes its builder itself.

    On a `shared` backend (a bucket, Pulumi Cloud) a stack with no record here may be a
    teammate's: only its expiry makes it stale."""
    stale = []
    for s in stacks:
        if state.locked(s.cluster):
            continue  # being created (or baked) right now
        expires = s.expires_at
        if state.exists(s.cluster):
            with contextlib.suppress(StateDamaged):
                expires = state.load(s.cluster).expires_at or expires
        if expires is not None and expires <= now:
            why = f"expired {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(expires))}"
        elif shared and not state.known(s.cluster):
            continue  # another machine's, live until its expiry
        elif s.kind == "bake":
            why = "an image bake no live `gpufleet image bake` here holds"
        elif not state.known(s.cluster):
            why = "no record of its cluster here"
        elif state.orphaned(s.cluster):
            why = "its `run` is dead"
        else:
            continue
        stale.append((s, why))
    return stale


def remove_stack(record: StackRecord, backend: str | None, progress: Progress) -> None:
    """Destroy a leftover stack and forget whatever is recorded of its cluster here."""
    from gpufleet.provision import pulumi

    if state.exists(record.cluster):
        from gpufleet.remote import head, holder

        holder.stop(record.cluster)
        with contextlib.suppress(StateDamaged):
            head.stop_mux(state.load(record.cluster))
    pulumi.remove_stack(record.stack, backend, progress)
    if state.known(record.cluster):
        state.forget(record.cluster, removed=True)
