"""Create and destroy clusters: spec -> provisioner -> saved ClusterInfo, and back."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from components.spec import PULUMI_CLOUDS, ClusterInfo, ClusterSpec
from gpufleet import sshconfig, state
from gpufleet.errors import ClusterBusy, ClusterExists, GpufleetError, StateDamaged
from gpufleet.provision import Progress, for_cloud
from gpufleet.signals import shielded


def create(
    spec: ClusterSpec, progress: Progress, *, owner: int | None = None, **options: object
) -> ClusterInfo:
    """Provision a validated spec and record it; a failed create leaves nothing behind.

    owner: the PID of a CLI that will remove the cluster itself (`run`); recorded first, so
    `gpufleet sweep` can tell an orphan from a cluster kept on purpose.
    """
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


def write_ssh_config(info: ClusterInfo, control_persist: str | None = None) -> Path:
    """The cluster's ssh config in its state folder, where `Include` finds it (see
    sshconfig.include_line) and from where `down` removes it with the rest of the folder."""
    path = state.cluster_dir(info.name) / sshconfig.FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(sshconfig.render(info, control_persist=control_persist))
    tmp.replace(path)
    return path


def destroy(info: ClusterInfo, progress: Progress, **options: object) -> None:
    """Remove every resource of a cluster, then its record."""
    from gpufleet.remote import head, holder

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
    from gpufleet.provision.local import stop_by_folder

    spec = None
    try:
        spec = state.load_spec(name)
    except Exception:
        progress(f"{name}: spec.json unreadable too; assuming a sandbox cluster")
    # processes whose command line names the folder (sandbox sshd, watchdog): always safe
    stop_by_folder(name, {})
    if spec is not None and spec.cloud in PULUMI_CLOUDS:
        stub = SimpleNamespace(name=name, provider={}, nodes=[])
        for_cloud(spec.cloud, **options).down(stub, progress)  # type: ignore[arg-type]
    state.forget(name, removed=True)


def extend(name: str, minutes: int) -> float:
    """Move a cluster's hard expiry to `minutes` from now; the new epoch seconds."""
    info = state.load(name)
    expires_at = time.time() + minutes * 60
    prov = for_cloud(info.cloud)
    move = getattr(prov, "extend", None)
    if move is None:
        raise GpufleetError(
            f"cluster {name!r} (cloud={info.cloud}) cannot be extended from the CLI yet",
            hint="re-create it with a longer --ttl",
        )
    move(info, expires_at)
    state.save(info.model_copy(update={"expires_at": expires_at}))
    return expires_at
