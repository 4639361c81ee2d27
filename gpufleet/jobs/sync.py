"""Syncs a job's working directory: rsync to the head once, then the head to every worker."""

from __future__ import annotations

import fnmatch
import io
import itertools
import os
import re
import shlex
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.core.errors import SyncFailed
from gpufleet.remote.head import (
    HEAD_ENV,
    control_path,
    finish,
    head_run,
    key_type,
    mux_options,
    popen,
    ssh_options,
    start_prepare,
    stderr_text,
    worker_rows,
)

if TYPE_CHECKING:
    from gpufleet.remote import Group

ALWAYS_SKIP = {
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
}
# The job's run folders (launch.run_dir) on a node: never sent, never deleted by a sync.
RUNS_DIR = ".gpufleet"
FANOUT_MARK = "__GPUFLEET_SYNC__"
Progress = Callable[[str], None]


def _git_files(root: Path) -> list[str] | None:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return [p for p in out.decode().split("\0") if p]


def _gitignore_patterns(root: Path) -> list[str]:
    f = root / ".gitignore"
    if not f.exists():
        return []
    lines = (ln.strip() for ln in f.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith(("#", "!"))]


def _walk(root: Path) -> list[str]:
    """Without git: every file not matching ALWAYS_SKIP or .gitignore (read by matches())."""
    patterns = [*ALWAYS_SKIP, *_gitignore_patterns(root)]
    return sorted(_all_files(root, lambda rel: any(matches(p, rel) for p in patterns)))


def job_files(root: Path) -> list[str]:
    """Relative paths to copy: what git would keep (skipping .git and .venv), else a walk."""
    files = _git_files(root)
    if files is None:
        return _walk(root)
    return sorted(
        p for p in files if not (set(Path(p).parts) & ALWAYS_SKIP) and (root / p).is_file()
    )


def matches(pattern: str, rel: str) -> bool:
    """gitignore-style: `*.log` at any depth, `/build` or `a/b` from the root, `dir/` a folder.

    A path matches when it or one of its parent folders does.
    """
    dir_only = pattern.endswith("/")
    pat = pattern.strip("/")
    if not pat:
        return False
    parts = rel.split("/")
    candidates = parts[:-1] if dir_only else parts
    if "/" in pattern.rstrip("/"):
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(candidates))]
        return any(fnmatch.fnmatchcase(p, pat) for p in prefixes)
    return any(fnmatch.fnmatchcase(p, pat) for p in candidates)


@dataclass(frozen=True)
class Selection:
    """What a sync copies (`files`) and what it leaves out, folders collapsed (`skipped`)."""

    files: list[str]
    skipped: list[str]

    def size(self, root: Path) -> int:
        return sum((root / f).lstat().st_size for f in self.files)


def _all_files(root: Path, ignored: Callable[[str], bool] = lambda rel: False) -> Iterable[str]:
    """Every file and symlink (a symlinked folder too, as git lists it) under `root` but .git,
    minus what `ignored` names; a folder is asked about as `dir/`, and not entered if ignored."""
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel + "/"
        links = [d for d in dirnames if d != ".git" and os.path.islink(os.path.join(dirpath, d))]
        dirnames[:] = [d for d in dirnames if d != ".git" and not ignored(f"{rel}{d}/")]
        yield from (rel + f for f in [*filenames, *links] if not ignored(rel + f))


def select(root: Path, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> Selection:
    """git's view of `root` (.gitignore), plus files matching `include`, minus `exclude`."""
    include, exclude = list(include), list(exclude)
    chosen = set(job_files(root))
    if include:
        chosen |= {f for f in _all_files(root) if any(matches(p, f) for p in include)}
    if exclude:
        chosen = {f for f in chosen if not any(matches(p, f) for p in exclude)}
    files = sorted(chosen)
    return Selection(files, _skipped(root, files))


def _skipped(root: Path, files: list[str]) -> list[str]:
    """Every entry not copied, as few as possible: a folder with nothing to copy is one entry."""
    wanted = set(files)
    dirs = {""}
    for f in files:
        parts = f.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    out = []
    for d in sorted(dirs):
        try:
            entries = list(os.scandir(root / d if d else root))
        except OSError:
            continue
        for e in entries:
            rel = f"{d}/{e.name}" if d else e.name
            if e.is_dir(follow_symlinks=False):
                if rel not in dirs:
                    out.append(rel + "/")
            elif rel not in wanted:
                out.append(rel)
    return sorted(out)


def _rsync_escape(path: str) -> str:
    return re.sub(r"([*?\[\\])", r"\\\1", path)


def rsync_filter(sel: Selection) -> str:
    """rsync filter rules that send exactly `sel.files`: protect the run folders, drop the rest.

    Rules name what is skipped (folders collapsed), not what is sent: rsync matches every
    file against every rule, so a rule per sent file would cost O(files^2).
    """
    lines = [f"P /{RUNS_DIR}/"]
    lines += [f"- /{_rsync_escape(s)}" for s in sel.skipped]
    return "\n".join(lines) + "\n"


def client_rsync_argv(info: Any, root: Path, filter_file: Path, control: str | None) -> list[str]:
    """rsync from this machine to the head's workdir, mirroring it (--delete), with stats."""
    head = info.nodes[0]
    opts = ssh_options(info.ssh_key_path, info.known_hosts_path, head.ssh_port, key_type(head))
    wd = head.workdir.rstrip("/") or "."
    return [
        "rsync",
        "-a",
        "--delete",
        "--delete-excluded",
        f"--filter=merge {filter_file}",
        "--info=progress2",
        "--stats",
        "-e",
        shlex.join(["ssh", *opts, *mux_options(control, master=False)]),
        f"--rsync-path=mkdir -p {shlex.quote(wd)} && rsync",
        f"{root}/",
        f"{info.ssh_user}@{head.public_ip}:{shlex.quote(wd)}/",
    ]


def fanout_script(info: Any, changed: bool = True, parallel: int = 64) -> str:
    """sh run in the head's workdir: rsync it to every worker, `parallel` at a time.

    Prints `FANOUT_MARK node rc bytes-sent` as each worker finishes. The run folders stay
    out of it: each node gets its own launch files. When this machine changed nothing on
    the head and the head's last pass reached these same workers, it prints
    `FANOUT_MARK-unchanged` and copies nothing.
    """
    rows = worker_rows(info)
    one = (
        f'out=$(rsync -a --whole-file --delete --filter="- /{RUNS_DIR}/" --stats '
        '--rsync-path="mkdir -p $4 && rsync" '
        '-e "$RSH -p $3 -o HostKeyAlgorithms=$5 -o ControlMaster=auto" '
        './ "$2:$4/" 2>&1); rc=$?; '
        "sent=$(printf '%s\\n' \"$out\" | sed -n 's/^Total bytes sent: //p' | tr -d ,); "
        f'echo "{FANOUT_MARK} $1 $rc ${{sent:-0}}"; '
        'if [ $rc = 0 ]; then : > "$K/ok.$1"; '
        'else printf \'%s\\n\' "$out" | tail -n 3 | sed "s/^/$1: /" >&2; fi'
    )
    return "\n".join(
        [
            "command -v rsync >/dev/null 2>&1 || exit 99",
            *HEAD_ENV,
            "cat > \"$K/workers\" <<'EOF'",
            *rows,
            "EOF",
            f'if [ {int(changed)} = 0 ] && cmp -s "$K/workers" "$K/synced"; then',
            f'  echo "{FANOUT_MARK}-unchanged"; exit 0',
            "fi",
            'rm -f "$K/synced" "$K"/ok.*',
            f'xargs -P {parallel} -L 1 sh -c {shlex.quote(one)} sh < "$K/workers"',
            f'[ "$(ls "$K" | grep -c "^ok\\.")" = {len(rows)} ] && cp "$K/workers" "$K/synced"',
            'rm -f "$K"/ok.*',
            "exit 0",
            "",
        ]
    )


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


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


_PROGRESS2 = re.compile(rb"^\s*([\d,]+)\s+(\d+)%\s+(\S+/s)")


def _run_client_rsync(argv: list[str], progress: Progress, head: str) -> tuple[int, bool]:
    """Run rsync, relaying its progress (bytes, %, rate) once a second after the first.

    Returns the bytes it sent and whether it changed anything on the head.
    """
    started = time.monotonic()
    last = started
    proc = popen(argv)
    tail = b""
    out = b""
    while chunk := proc.stdout.read1(65536):  # type: ignore[attr-defined]
        out += chunk
        tail = (tail + chunk)[-4096:]
        now = time.monotonic()
        if now - started > 1.0 and now - last > 1.0:
            lines = re.split(rb"[\r\n]", tail)
            hit = next((m for ln in reversed(lines) if (m := _PROGRESS2.match(ln))), None)
            if hit:
                done, pct, rate = hit.groups()
                progress(
                    f"→ {head}: {_mb(int(done.replace(b',', b'')))} {pct.decode()}% {rate.decode()}"
                )
                last = now
    err = stderr_text(proc)
    code = proc.wait()
    if code != 0:
        raise SyncFailed(head, code, err.strip()[-1000:])
    return parse_stats(out.decode(errors="replace"))


def parse_stats(text: str) -> tuple[int, bool]:
    """(bytes sent, anything created/deleted/transferred) from `rsync --stats` output."""

    def num(label: str) -> int:
        m = re.search(rf"^{label}: ([\d,]+)", text, re.M)
        return int(m.group(1).replace(",", "")) if m else 0

    changed = any(
        num(k)
        for k in (
            "Number of created files",
            "Number of deleted files",
            "Number of regular files transferred",
        )
    )
    return num("Total bytes sent"), changed


def sync(
    info: Any,
    root: Path,
    *,
    group: Group | None = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    progress: Progress = lambda _m: None,
    method: str = "auto",
) -> SyncReport:
    """Mirror `root` into every node's workdir (files the workdir lost are removed there).

    rsync (auto, when this machine and the head have it): this machine uploads to the
    head only, over one OpenSSH connection kept a few minutes for the next sync; the head
    rsyncs to the workers over the cluster network. Otherwise, or for workers without
    rsync: a tar over each node's paramiko connection (`group`, or a new one).
    """
    import shutil

    started = time.monotonic()
    sel = select(root, include, exclude)
    size = sel.size(root)
    if sel.skipped:
        shown = ", ".join(sel.skipped[:8]) + (" ..." if len(sel.skipped) > 8 else "")
        progress(f"not copied ({len(sel.skipped)}, .gitignore; --include to add): {shown}")
    progress(f"syncing {len(sel.files)} files ({_mb(size)}) to {len(info.nodes)} nodes")
    use_rsync = method == "rsync" or (
        method == "auto" and shutil.which("rsync") is not None and shutil.which("ssh") is not None
    )
    report = SyncReport("paramiko", len(sel.files), size, sel.skipped, 0)
    todo = [n.name for n in info.nodes]
    if use_rsync:
        todo = _rsync_via_head(info, root, sel, progress, report)
    if todo:
        if report.method != "paramiko":
            progress(f"no rsync on {', '.join(todo)}: copying over SSH directly")
        if group is None:
            from gpufleet.remote import Group

            with Group(info, todo) as g:
                report.uploaded += _paramiko_put(g, root, sel, todo)
        else:
            report.uploaded += _paramiko_put(group, root, sel, todo)
    report.seconds = time.monotonic() - started
    progress(
        f"synced in {report.seconds:.1f}s; uploaded {_mb(report.uploaded)} from this machine "
        f"({report.method})"
    )
    return report


def _rsync_via_head(
    info: Any, root: Path, sel: Selection, progress: Progress, report: SyncReport
) -> list[str]:
    """This machine -> head, head -> workers; returns the nodes still to copy without rsync."""
    from gpufleet.core import state

    head = info.nodes[0]
    cdir = state.cluster_dir(info.name)
    control = control_path(cdir)
    filt = cdir / "sync.filter"
    filt.parent.mkdir(parents=True, exist_ok=True)
    filt.write_text(rsync_filter(sel))
    t0 = time.monotonic()
    # Handing the head its keys needs no data: it overlaps the upload.
    prep = start_prepare(info, control)
    try:
        sent, changed = _run_client_rsync(
            client_rsync_argv(info, root, filt, control), progress, head.name
        )
    except SyncFailed:
        if finish(prep)[0] == 99:
            return [n.name for n in info.nodes]  # no rsync on the head
        raise
    code, prep_err = finish(prep)
    if code == 255:  # OpenSSH itself failed (e.g. two masters raced): once more, unshared
        code, prep_err = finish(start_prepare(info, None))
    if code == 99:
        return [n.name for n in info.nodes]
    if code != 0:
        raise SyncFailed(head.name, code, prep_err[-800:])
    report.method = "rsync via head"
    report.uploaded += sent
    progress(f"{head.name}: {_mb(sent)} sent in {time.monotonic() - t0:.1f}s")
    if len(info.nodes) == 1:
        return []
    t1 = time.monotonic()
    results: dict[str, tuple[int, int]] = {}
    unchanged = False
    script = fanout_script(info, changed)
    fan = head_run(info, control, script)
    first = fan.stdout.readline()
    if not first and fan.wait() == 255:  # OpenSSH failed before the head ran anything
        stderr_text(fan)  # closes its spool file
        fan = head_run(info, None, script)
        first = fan.stdout.readline()
    for raw in itertools.chain([first], fan.stdout):
        line = raw.decode(errors="replace").strip()
        if line == FANOUT_MARK + "-unchanged":
            unchanged = True
        elif line.startswith(FANOUT_MARK + " "):
            _, name, rc, nbytes = line.split()
            results[name] = (int(rc), int(nbytes))
            elapsed = time.monotonic() - t1
            if int(rc) == 0 and elapsed > 1.0:  # per node only when it takes a while
                progress(
                    f"{head.name} → {name}: {_mb(int(nbytes))} in {elapsed:.1f}s "
                    f"({_mb(int(nbytes) / elapsed)}/s; {len(results)}/{len(info.nodes) - 1})"
                )
    err = stderr_text(fan)
    if fan.wait() != 0:
        raise SyncFailed(head.name, fan.returncode, f"head to workers: {err[-800:]}")
    if unchanged:
        progress(f"nothing changed: the workers already have {head.name}'s copy")
        return []
    no_rsync = [n for n, (rc, _) in results.items() if rc == 127]
    failed = {n: rc for n, (rc, _) in results.items() if rc not in (0, 127)}
    missing = [n.name for n in info.nodes[1:] if n.name not in results]
    if failed or missing:
        detail = "; ".join(f"{n}: rsync exit {rc}" for n, rc in failed.items())
        detail += "".join(f"; {n}: no result" for n in missing)
        raise SyncFailed(head.name, 1, f"head to workers: {detail.strip('; ')}\n{err[-800:]}")
    report.per_node = {n: b for n, (rc, b) in results.items() if rc == 0}
    progress(
        f"{head.name} → {len(report.per_node)} workers: "
        f"{_mb(sum(report.per_node.values()))} in {time.monotonic() - t1:.1f}s"
    )
    return no_rsync


def _paramiko_put(group: Group, root: Path, sel: Selection, nodes: list[str]) -> int:
    """A plain tar to each node over its own connection, then files it no longer has removed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in sel.files:
            tar.add(root / rel, arcname=rel, recursive=False)
        manifest = "".join(f"{f}\n" for f in sel.files).encode()
        ti = tarfile.TarInfo(f"{RUNS_DIR}/manifest")
        ti.size, ti.mtime = len(manifest), int(time.time())
        tar.addfile(ti, io.BytesIO(manifest))
    data = buf.getvalue()
    group.subset(nodes).run(prune_command(), stdin=data, what="sync")
    return len(data) * len(nodes)


def prune_command() -> str:
    """Unpack stdin, then delete files the manifest does not list (never the run folders)."""
    return (
        f"tar -xf - && find . -path ./{RUNS_DIR} -prune -o ! -type d -print "
        f"| sed 's|^\\./||' | LC_ALL=C sort > {RUNS_DIR}/have && "
        f"LC_ALL=C sort {RUNS_DIR}/manifest | LC_ALL=C comm -23 {RUNS_DIR}/have - "
        '| while IFS= read -r f; do rm -f "./$f"; done; '
        f"find . -mindepth 1 -depth -type d -empty ! -path './{RUNS_DIR}*' -delete; "
        f"rm -f {RUNS_DIR}/have"
    )


def parse_fast(args: list[str]) -> dict[str, Any] | None:
    """`sync NAME [--workdir D] [--include P]... [--exclude P]... [--sync-method M] [--json]`
    parsed without typer (~1 s of start-up here); None for anything else."""
    if len(args) < 2 or args[0] != "sync" or args[1].startswith("-"):
        return None
    out: dict[str, Any] = {
        "name": args[1],
        "workdir": ".",
        "include": [],
        "exclude": [],
        "method": "auto",
        "json": False,
    }
    rest = iter(args[2:])
    for a in rest:
        if a == "--json":
            out["json"] = True
            continue
        key = {
            "--workdir": "workdir",
            "--include": "include",
            "--exclude": "exclude",
            "--sync-method": "method",
        }.get(a)
        value = next(rest, None)
        if key is None or value is None:
            return None
        if isinstance(out[key], list):
            out[key].append(value)
        else:
            out[key] = value
    if out["method"] not in ("auto", "rsync", "paramiko") or not Path(out["workdir"]).is_dir():
        return None  # typer reports it
    return out
