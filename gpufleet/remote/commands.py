"""Shell text run on a node: the wrapped command (its PID line, its session watch), kill, tar."""

from __future__ import annotations

import io
import shlex
import tarfile
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import NodeInfo

PID_MARK = "__GPUFLEET_PID__"


def wrap_command(node: NodeInfo, command: str, tied: bool = False) -> str:
    """Run `command` in the node's workdir, first printing the PID that leads its process group.

    sshd starts each session's shell in a new session, so that PID is also the group
    cancel() kills; commands that `exec` their launcher keep it.

    tied: the command's process group ends with its SSH session. sshd leaves a session's
    processes running when the connection drops (no pty, so no SIGHUP): their shell is only
    re-parented. A watcher sees that and TERMs the group (KILL 5 s later). For machines
    gpufleet did not create, where no lease may stop a dead CLI's ranks; it writes nothing.
    """
    wd = shlex.quote(node.workdir)
    head = f"printf '{PID_MARK} %s\\n' $$; mkdir -p {wd} && cd {wd}"
    if not tied:
        return f"exec /bin/sh -c {shlex.quote(f'{head} && {command}')}"
    inner = f"{head} || exit 1\n{SESSION_WATCH}({command}\n)\nr=$?; kill $w 2>/dev/null; exit $r"
    return f"exec /bin/sh -c {shlex.quote(inner)}"


# Field 4 of /proc/PID/stat is the parent PID (field 2, "(sh)", holds no space). The
# watcher's own TERM is ignored only once it acts, so cancel() still ends it at once.
SESSION_WATCH = (
    "w=; if [ -r /proc/$$/stat ] && read -r _ _ _ s _ </proc/$$/stat; then "
    '( while read -r _ _ _ p _ </proc/$$/stat && [ "$p" = "$s" ]; do sleep 1; done; '
    "trap '' TERM; kill -TERM -$$; sleep 5; kill -KILL -$$ ) </dev/null >/dev/null 2>&1 & "
    "w=$!; fi\n"
)


def marked_command(marker: str) -> str:
    """Shell defining `scan`: the PIDs (not this shell's) whose environment holds the line
    `marker` (e.g. GPUFLEET_RUN_ID=<id>); on the sandbox only this node's, those whose
    GPUFLEET_SANDBOX / GPUFLEET_NODE are the session's. Other users' /proc/PID/environ is
    unreadable, so only the SSH user's own processes are found."""
    want = shlex.quote(marker)
    return (
        f'scan() {{ for p in /proc/[0-9]*; do q=${{p#/proc/}}; [ "$q" = $$ ] && continue; '
        f'e=$(tr "\\0" "\\n" < "$p/environ" 2>/dev/null) || continue; '
        f"printf '%s\\n' \"$e\" | grep -qxF {want} || continue; "
        'if [ -n "${GPUFLEET_NODE:-}" ]; then '
        'printf \'%s\\n\' "$e" | grep -qxF "GPUFLEET_NODE=$GPUFLEET_NODE" || continue; '
        'printf \'%s\\n\' "$e" | grep -qxF "GPUFLEET_SANDBOX=$GPUFLEET_SANDBOX" || continue; fi; '
        'echo "$q"; done; }; '
    )


def kill_group_command(pid: int, grace_s: float = 5.0, marker: str | None = None) -> str:
    """TERM the process group, wait for it to go (up to grace_s), then KILL it.

    marker: then also TERM every process whose environment holds it, wait up to grace_s,
    KILL those left. torchrun's agent starts its ranks in sessions of their own, so the group
    kill misses them, and the agent KILLed before its own shutdown leaves them running (and
    holding the SSH session's output) while they wait on a peer that vanished.
    `kill -SIG -PGID` without `--`: dash's builtin kill rejects `--`.
    """
    steps = int(grace_s / 0.1)
    group = (
        f"if kill -TERM -{pid} 2>/dev/null; then i=0; "
        f"while [ $i -lt {steps} ] && kill -0 -{pid} 2>/dev/null; do sleep 0.1; i=$((i+1)); done; "
        f"kill -KILL -{pid} 2>/dev/null; fi; "
    )
    if not marker:
        return group + "exit 0"
    return (
        marked_command(marker)
        + group
        + 'l=$(scan); [ -n "$l" ] || exit 0; kill -TERM $l 2>/dev/null; i=0; '
        # a scan forks per process: waited on with kill -0, scanned again only for the KILL
        + f"while [ $i -lt {steps} ]; do a=; for q in $l; do kill -0 $q 2>/dev/null && a=1; "
        + 'done; [ -n "$a" ] || exit 0; sleep 0.1; i=$((i+1)); done; '
        + 'l=$(scan); [ -n "$l" ] && kill -KILL $l 2>/dev/null; exit 0'
    )


def tar_files(files: Mapping[str, bytes | str], mode: int | None = None) -> bytes:
    """An uncompressed tar of relative path -> content (dirs are created by tar); every file
    `mode` if given, else 0755 for scripts and 0644 for the rest."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            ti = tarfile.TarInfo(path)
            ti.size = len(data)
            ti.mode = (
                mode if mode is not None else 0o755 if path.endswith((".sh", ".py")) else 0o644
            )
            ti.mtime = int(time.time())
            tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()
