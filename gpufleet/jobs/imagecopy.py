"""An image archive to every node: this machine to the head once, the head to the workers."""

from __future__ import annotations

import hashlib
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.core.errors import GpufleetError
from gpufleet.jobs.rsync import mb
from gpufleet.remote.head import (
    HEAD_ENV,
    control_path,
    finish,
    head_run,
    prepare_script,
    start_prepare,
    stderr_text,
    worker_rows,
)

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord
    from gpufleet.provision import Progress
    from gpufleet.remote import Group

IMAGES_DIR = ".gpufleet/images"  # in each node's workdir: archives named by their sha256
COPY_MARK = "__GPUFLEET_IMAGE_COPY__"
CHUNK = 1 << 20


class ImageCopyFailed(GpufleetError):
    """The image archive did not reach a node; names it, with the copy's exit code and output."""

    def __init__(self, node: str, code: int, detail: str):
        super().__init__(
            f"copying the image archive to {node} failed (exit {code}): {detail}",
            hint="check the node's disk space (the archive goes to its workdir's "
            f"{IMAGES_DIR}) and that the workdir is writable",
        )
        self.node, self.code, self.detail = node, code, detail


@dataclass
class CopyReport:
    """Where the archive is on every node, and what copying it cost."""

    dest: str  # relative to each node's workdir
    uploaded: int = 0  # bytes this machine sent
    copied: list[str] = field(default_factory=list)  # nodes that got the file this time
    method: str = "ssh via head"  # | "paramiko" (no OpenSSH client here) | "present"
    seconds: float = 0.0


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def dest_for(digest: str) -> str:
    return f"{IMAGES_DIR}/{digest}.tar"


def _put_line(rel: str, wd: str = ".") -> str:
    """sh that writes stdin to `rel` under `wd`, renamed into place only once complete."""
    d, f = shlex.quote(f"{wd}/{IMAGES_DIR}"), shlex.quote(f"{wd}/{rel}")
    part = shlex.quote(f"{wd}/{rel}.part")
    return f"mkdir -p {d} && cat > {part} && mv -f {part} {f}"


def fanout_script(info: ClusterRecord, rel: str, workers: list[str], parallel: int) -> str:
    """sh for the head's workdir: its copy of `rel` to each worker over the cluster network.

    Uses the keys and kept connections prepare_script handed the head (as sync does).
    Prints `COPY_MARK node rc` per worker; a copy lands under its name only once complete.
    """
    rows = [r for r in worker_rows(info) if r.split()[0] in workers]
    one = (
        f'out=$($RSH -p "$3" -o HostKeyAlgorithms="$5" -o ControlMaster=auto "$2" '
        f'"{_put_line(rel, "$4")}" < "$F" 2>&1); rc=$?; '
        f'echo "{COPY_MARK} $1 $rc"; '
        '[ $rc = 0 ] || printf \'%s\\n\' "$out" | tail -n 3 | sed "s/^/$1: /" >&2'
    )
    return "\n".join(
        [
            *HEAD_ENV,
            f"F={shlex.quote(rel)}; export F",
            '[ -f "$F" ] || exit 97',
            "cat > \"$K/image-workers\" <<'EOF'",
            *rows,
            "EOF",
            f'xargs -P {parallel} -L 1 sh -c {shlex.quote(one)} sh < "$K/image-workers"',
            "",
        ]
    )


def sizes(group: Group, rel: str) -> dict[str, int]:
    """node -> the size of its `rel` (-1 when it has none)."""
    q = shlex.quote(rel)
    res = group.run(f"stat -c %s {q} 2>/dev/null || echo -1", check=False, what="stat")
    out = {}
    for n, r in res.items():
        try:
            out[n] = int(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            out[n] = -1
    return out


def distribute(
    info: ClusterRecord,
    group: Group,
    path: Path,
    digest: str,
    progress: Progress,
    *,
    parallel: bool = True,
) -> CopyReport:
    """Put `path` at dest_for(digest) in every node's workdir; nodes that have it are skipped.

    This machine sends it to the head only (OpenSSH, over the connection sync keeps); the
    head sends it to the workers. Without an OpenSSH client here, or for workers the head
    cannot reach, each node gets it over its own paramiko connection instead.
    """
    started = time.monotonic()
    size = path.stat().st_size
    rel = dest_for(digest)
    have = sizes(group, rel)
    missing = [n.name for n in group.nodes if have.get(n.name) != size]
    rep = CopyReport(rel)
    if not missing:
        rep.method = "present"
        progress(f"image archive already on every node ({rel})")
        return rep
    head = info.nodes[0].name
    workers = [n for n in missing if n != head]
    direct: list[str] = []
    if shutil.which("ssh") is None or head not in have:
        direct = missing  # no OpenSSH here, or the head is not one of these nodes
    else:
        if workers:
            _prepare(info)
        if head in missing:
            rep.uploaded += _to_head(info, path, rel, progress)
            rep.copied.append(head)
        if workers:
            direct = _head_to_workers(info, rel, workers, parallel, progress, rep)
    if direct:
        rep.method = "paramiko" if direct == missing else rep.method
        progress(f"copying the image archive over SSH directly to {', '.join(direct)}")
        targets = [direct] if parallel else [[n] for n in direct]
        for batch in targets:
            with group.subset(batch) as g:  # streamed from the file, never read whole
                g.run(_put_line(rel), stdin=path, what="image archive copy")
        rep.uploaded += size * len(direct)
        rep.copied += direct
    rep.seconds = time.monotonic() - started
    progress(
        f"image archive ({mb(size)}) on {len(rep.copied)} node(s) in {rep.seconds:.1f}s; "
        f"uploaded {mb(rep.uploaded)} from this machine"
    )
    return rep


def remove(group: Group, rel: str) -> None:
    """Delete the archive `rel` (and its folder, if then empty) from every node's workdir."""
    q, d = shlex.quote(rel), shlex.quote(IMAGES_DIR)
    group.run(f"rm -f {q} && rmdir {d} 2>/dev/null; true", check=False, what="archive cleanup")


def _prepare(info: ClusterRecord) -> None:
    """Hand the head the cluster key and the workers' host keys (no rsync needed)."""
    from gpufleet.core import state

    control = control_path(state.cluster_dir(info.name))
    script = prepare_script(info, require_rsync=False)
    code, err = finish(start_prepare(info, control, script))
    if code == 255:  # OpenSSH itself failed (e.g. a stale master socket): once more, unshared
        code, err = finish(start_prepare(info, None, script))
    if code != 0:
        raise ImageCopyFailed(info.nodes[0].name, code, err[-800:])


def _to_head(info: ClusterRecord, path: Path, rel: str, progress: Progress) -> int:
    """Stream the file to the head over OpenSSH; the bytes sent."""
    from gpufleet.core import state

    control = control_path(state.cluster_dir(info.name))
    head = info.nodes[0].name
    size, sent = path.stat().st_size, 0
    t0 = shown = time.monotonic()
    proc = head_run(info, control, _put_line(rel), stdin=True)
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                proc.stdin.write(chunk)
                sent += len(chunk)
                now = time.monotonic()
                if now - shown >= 2.0:
                    shown = now
                    progress(f"→ {head}: {mb(sent)} of {mb(size)} at {mb(sent / (now - t0))}/s")
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the head's command ended early: its exit code and stderr say why
    code, err = finish(proc)
    if code != 0:
        raise ImageCopyFailed(head, code, f"image archive upload: {err[-800:]}")
    elapsed = max(time.monotonic() - t0, 1e-6)
    progress(f"{head}: {mb(sent)} in {elapsed:.1f}s ({mb(sent / elapsed)}/s)")
    return sent


def _head_to_workers(
    info: ClusterRecord,
    rel: str,
    workers: list[str],
    parallel: bool,
    progress: Progress,
    rep: CopyReport,
) -> list[str]:
    """The head's copy to `workers`; returns those it could not reach (ssh missing on it)."""
    from gpufleet.core import state

    control = control_path(state.cluster_dir(info.name))
    head = info.nodes[0].name
    t0 = time.monotonic()
    script = fanout_script(info, rel, workers, len(workers) if parallel else 1)
    fan = head_run(info, control, script)
    results: dict[str, int] = {}
    for raw in fan.stdout:
        line = raw.decode(errors="replace").strip()
        if line.startswith(COPY_MARK + " "):
            _, name, rc = line.split()
            results[name] = int(rc)
            elapsed = time.monotonic() - t0
            if int(rc) == 0:
                progress(f"{head} → {name}: in {elapsed:.1f}s ({len(results)}/{len(workers)})")
    err = stderr_text(fan)
    if fan.wait() != 0:
        raise ImageCopyFailed(head, fan.returncode, f"image archive, head to workers: {err[-800:]}")
    no_ssh = [n for n, rc in results.items() if rc == 127]
    failed = {n: rc for n, rc in results.items() if rc not in (0, 127)}
    missing = [n for n in workers if n not in results]
    if failed or missing:
        detail = "; ".join(f"{n}: exit {rc}" for n, rc in failed.items())
        detail += "".join(f"; {n}: no result" for n in missing)
        raise ImageCopyFailed(
            head, 1, f"image archive, head to workers: {detail.strip('; ')}\n{err}"
        )
    rep.copied += [n for n, rc in results.items() if rc == 0]
    return no_ssh
