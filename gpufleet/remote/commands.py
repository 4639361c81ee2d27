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


def kill_group_command(pid: int, grace_s: float = 5.0) -> str:
    """TERM the process group, wait for it to go (up to grace_s), then KILL it.

    `kill -SIG -PGID` without `--`: dash's builtin kill rejects `--`.
    """
    steps = int(grace_s / 0.1)
    return (
        f"kill -TERM -{pid} 2>/dev/null || exit 0; i=0; "
        f"while [ $i -lt {steps} ]; do kill -0 -{pid} 2>/dev/null || exit 0; "
        f"sleep 0.1; i=$((i+1)); done; kill -KILL -{pid} 2>/dev/null; exit 0"
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
