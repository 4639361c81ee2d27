"""Syncs a job's working directory: rsync to the head once, then the head to every worker."""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.jobs.rsync import mb, rsync_via_head
from gpufleet.jobs.syncfiles import RUNS_DIR, Selection, manifest, select

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord
    from gpufleet.provision import Progress
    from gpufleet.remote import Group


@dataclass
class SyncReport:
    """What a sync did: how, how much this machine uploaded, what each worker got."""

    method: str  # "rsync via head" | "paramiko"
    files: int
    size: int
    skipped: list[str]
    uploaded: int  # bytes this machine sent
    seconds: float = 0.0
    per_node: dict[str, int] = field(default_factory=dict)  # worker -> bytes the head sent


def sync(
    info: ClusterRecord,
    root: Path,
    *,
    group: Group | None = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    progress: Progress = lambda _m: None,
    method: str = "auto",
    protect: Iterable[str] = (),
) -> SyncReport:
    """Mirror `root` into every node's workdir (files the workdir lost are removed there).

    rsync (auto, when this machine and the head have it): this machine uploads to the
    head only, over one OpenSSH connection kept a few minutes for the next sync; the head
    rsyncs to the workers over the cluster network. Otherwise, or for workers without
    rsync: a tar over each node's paramiko connection (`group`, or a new one). The
    `protect` folders (relative: a run's checkpoint folder) are neither sent nor deleted.
    """
    import shutil

    started = time.monotonic()
    keep = [p.strip("/").removeprefix("./") for p in protect if p.strip("/")]
    sel = select(root, include, exclude)
    if keep:
        sel = Selection(
            [f for f in sel.files if not any(f == k or f.startswith(k + "/") for k in keep)],
            sel.skipped,
        )
    size = sel.size(root)
    if sel.skipped:
        shown = ", ".join(sel.skipped[:8]) + (" ..." if len(sel.skipped) > 8 else "")
        progress(f"not copied ({len(sel.skipped)}, .gitignore; --include to add): {shown}")
    progress(f"syncing {len(sel.files)} files ({mb(size)}) to {len(info.nodes)} nodes")
    use_rsync = method == "rsync" or (
        method == "auto" and shutil.which("rsync") is not None and shutil.which("ssh") is not None
    )
    report = SyncReport("paramiko", len(sel.files), size, sel.skipped, 0)
    todo = [n.name for n in info.nodes]
    if use_rsync:
        todo = rsync_via_head(info, root, sel, progress, report, keep)
    if todo:
        if report.method != "paramiko":
            progress(f"no rsync on {', '.join(todo)}: copying over SSH directly")
        if group is None:
            from gpufleet.remote import Group

            with Group(info, todo) as g:
                report.uploaded += _paramiko_put(g, root, sel, todo, keep)
        else:
            report.uploaded += _paramiko_put(group, root, sel, todo, keep)
    report.seconds = time.monotonic() - started
    progress(
        f"synced in {report.seconds:.1f}s; uploaded {mb(report.uploaded)} from this machine "
        f"({report.method})"
    )
    return report


def _paramiko_put(
    group: Group, root: Path, sel: Selection, nodes: list[str], protect: list[str]
) -> int:
    """A plain tar to each node over its own connection, then files it no longer has removed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in sel.files:
            tar.add(root / rel, arcname=rel, recursive=False)
        listed = manifest(sel)
        ti = tarfile.TarInfo(f"{RUNS_DIR}/manifest")
        ti.size, ti.mtime = len(listed), int(time.time())
        tar.addfile(ti, io.BytesIO(listed))
    data = buf.getvalue()
    group.subset(nodes).run(prune_command(protect), stdin=data, what="sync")
    return len(data) * len(nodes)


def prune_command(protect: Iterable[str] = ()) -> str:
    """Unpack stdin, then delete files the manifest does not list (never the run folders,
    nor the `protect` ones)."""
    import shlex

    skip = "".join(f" -path {shlex.quote('./' + p)} -prune -o" for p in protect)
    keep = "".join(
        f" ! -path {shlex.quote('./' + p)} ! -path {shlex.quote('./' + p + '/*')}" for p in protect
    )
    return (
        f"tar -xf - && find . -path ./{RUNS_DIR} -prune -o{skip} ! -type d -print "
        f"| sed 's|^\\./||' | LC_ALL=C sort > {RUNS_DIR}/have && "
        f"LC_ALL=C sort {RUNS_DIR}/manifest | LC_ALL=C comm -23 {RUNS_DIR}/have - "
        '| while IFS= read -r f; do rm -f "./$f"; done; '
        f"find . -mindepth 1 -depth -type d -empty ! -path './{RUNS_DIR}*'{keep} -delete; "
        f"rm -f {RUNS_DIR}/have"
    )
