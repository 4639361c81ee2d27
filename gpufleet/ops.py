"""Create and destroy clusters: spec -> provisioner -> saved ClusterInfo, and back."""

from __future__ import annotations

from pathlib import Path

from components.spec import ClusterInfo, ClusterSpec
from gpufleet import sshconfig, state
from gpufleet.errors import ClusterExists
from gpufleet.provision import Progress, for_cloud


def create(spec: ClusterSpec, progress: Progress, **options: object) -> ClusterInfo:
    """Provision a validated spec and record it; a failed create leaves nothing behind."""
    if state.exists(spec.name):
        raise ClusterExists(spec.name)
    provisioner = for_cloud(spec.cloud, **options)
    info = provisioner.up(spec, progress)
    state.save_spec(spec)
    state.save(info)
    write_ssh_config(info)
    return info


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
    state.forget(info.name)
