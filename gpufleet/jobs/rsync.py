"""The rsync path of a sync: this machine to the head over one connection, the head to workers."""

from __future__ import annotations

import itertools
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.core.errors import SyncFailed
from gpufleet.jobs.syncfiles import RUNS_DIR, Selection
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
    from gpufleet.core.state import ClusterRecord
    from gpufleet.jobs.sync import SyncReport
    from gpufleet.provision import Progress

FANOUT_MARK = "__GPUFLEET_SYNC__"


def _rsync_escape(path: str) -> str:
    return re.sub(r"([*?\[\\])", r"\\\1", path)


def rsync_filter(sel: Selection, protect: Sequence[str] = ()) -> str:
    """rsync filter rules that send exactly `sel.files`: protect the run folders (and the
    `protect` folders: a run's relative checkpoint folder), drop the rest.

    Rules name what is skipped (folders collapsed), not what is sent: rsync matches every
    file against every rule, so a rule per sent file would cost O(files^2).
    """
    lines = [f"P /{RUNS_DIR}/"]
    # P: never deleted on the head (--delete-excluded); -: never sent from here either
    lines += [f"P /{_rsync_escape(p)}/" for p in protect]
    lines += [f"- /{_rsync_escape(p)}/" for p in protect]
    lines += [f"- /{_rsync_escape(s)}" for s in sel.skipped]
    return "\n".join(lines) + "\n"


def client_rsync_argv(
    info: ClusterRecord, root: Path, filter_file: Path, control: str | None
) -> list[str]:
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


def fanout_script(
    info: ClusterRecord, changed: bool = True, parallel: int = 64, protect: Sequence[str] = ()
) -> str:
    """sh run in the head's workdir: rsync it to every worker, `parallel` at a time.

    Prints `FANOUT_MARK node rc bytes-sent` as each worker finishes. The run folders stay
    out of it: each node gets its own launch files. When this machine changed nothing on
    the head and the head's last pass reached these same workers, it prints
    `FANOUT_MARK-unchanged` and copies nothing.
    """
    rows = worker_rows(info)
    # What "the same workers" means: their addresses and their host keys, so that a node
    # replaced at the same address (a recovery's new VM) is copied to again.
    keys = [f"{n.name} {n.host_key}" for n in info.nodes[1:]]
    # excluded, so never deleted on a worker (no --delete-excluded): each node's own
    keep = "".join(f" --filter={shlex.quote('- /' + _rsync_escape(p) + '/')}" for p in protect)
    one = (
        f'out=$(rsync -a --whole-file --delete --filter="- /{RUNS_DIR}/"{keep} --stats '
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
            "cat > \"$K/workers.id\" <<'EOF'",
            *rows,
            *keys,
            "EOF",
            f'if [ {int(changed)} = 0 ] && cmp -s "$K/workers.id" "$K/synced"; then',
            f'  echo "{FANOUT_MARK}-unchanged"; exit 0',
            "fi",
            'rm -f "$K/synced" "$K"/ok.*',
            f'xargs -P {parallel} -L 1 sh -c {shlex.quote(one)} sh < "$K/workers"',
            f'[ "$(ls "$K" | grep -c "^ok\\.")" = {len(rows)} ] && cp "$K/workers.id" "$K/synced"',
            'rm -f "$K"/ok.*',
            "exit 0",
            "",
        ]
    )


def mb(n: float) -> str:
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
                    f"→ {head}: {mb(int(done.replace(b',', b'')))} {pct.decode()}% {rate.decode()}"
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


def rsync_via_head(
    info: ClusterRecord,
    root: Path,
    sel: Selection,
    progress: Progress,
    report: SyncReport,
    protect: Sequence[str] = (),
) -> list[str]:
    """This machine -> head, head -> workers; returns the nodes still to copy without rsync."""
    from gpufleet.core import state

    head = info.nodes[0]
    cdir = state.cluster_dir(info.name)
    control = control_path(cdir)
    filt = cdir / "sync.filter"
    filt.parent.mkdir(parents=True, exist_ok=True)
    filt.write_text(rsync_filter(sel, protect))
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
    progress(f"{head.name}: {mb(sent)} sent in {time.monotonic() - t0:.1f}s")
    if len(info.nodes) == 1:
        return []
    t1 = time.monotonic()
    results: dict[str, tuple[int, int]] = {}
    unchanged = False
    script = fanout_script(info, changed, protect=protect)
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
                    f"{head.name} → {name}: {mb(int(nbytes))} in {elapsed:.1f}s "
                    f"({mb(int(nbytes) / elapsed)}/s; {len(results)}/{len(info.nodes) - 1})"
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
        f"{mb(sum(report.per_node.values()))} in {time.monotonic() - t1:.1f}s"
    )
    return no_rsync
