"""The head as the cluster's relay: one kept OpenSSH connection to it, and its keys to the workers.

Sync and tree-mode exec both hand the head the cluster key and the workers' pinned host
keys (HEAD_KEYS, in its workdir), so the head reaches the workers over the cluster
network, through one persistent OpenSSH connection per worker that it keeps.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.remote import knownhosts, sshopts
from gpufleet.remote.commands import tar_files

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import ClusterInfo
    from gpufleet.core.state import ClusterRecord

# Where the head keeps the cluster key and the workers' pinned host keys: in its workdir's run
# folder (jobs/syncfiles.RUNS_DIR, which no rsync of the workdir sends or deletes), never beside the
# workdir: on hosts gpufleet did not create, nothing may be left outside it.
HEAD_KEYS = ".gpufleet/ssh"
MUX_PERSIST_S = 300


def ssh_options(key: str, known_hosts: str, port: int, host_key_type: str) -> list[str]:
    """OpenSSH options: the cluster key, the pinned host key only, never a prompt."""
    options = sshopts.pinned(known_hosts, host_key_type) + sshopts.TRANSPORT
    return ["-F", "/dev/null", "-i", key, "-p", str(port), *sshopts.as_args(options)]


def mux_options(control_path: str | None, master: bool = True) -> list[str]:
    """Share one SSH connection between the commands of a sync and the next few syncs.

    master=False: use the shared connection if it is there, never start it (two commands
    starting it at once race for its socket).
    """
    if control_path is None:
        return []
    return [
        "-o",
        f"ControlMaster={'auto' if master else 'no'}",
        "-o",
        f"ControlPersist={MUX_PERSIST_S}",
        "-o",
        f"ControlPath={control_path}",
    ]


# A Unix socket's path (sun_path): 108 bytes on Linux, 104 on macOS and the BSDs, with its NUL.
# OpenSSH binds a master at the ControlPath plus ".<16 random characters>", then renames it
# (mux.c): 17 bytes more. Measured with OpenSSH 9.2 on Linux: 90 made a master, 94 printed
# "unix_listener: path ... too long for Unix domain socket" and ran without one.
LINUX_MAX_CONTROL_PATH = 108 - 18  # the nodes' (the head's own worker connections)
MAX_CONTROL_PATH = LINUX_MAX_CONTROL_PATH if sys.platform.startswith("linux") else 104 - 18


def control_path(cluster_dir: Path) -> str | None:
    """The head connection's socket, in the cluster's state folder; None if too long for one."""
    path = str(cluster_dir / "mux-head")
    return path if len(path.encode()) <= MAX_CONTROL_PATH else None


def key_type(node: Any) -> str:
    return (node.host_key.split() or ["ssh-ed25519"])[0]


def head_ssh_argv(info: ClusterRecord, control: str | None) -> list[str]:
    """`ssh ... user@head` (then the remote command) through the shared head connection."""
    head = info.nodes[0]
    opts = ssh_options(info.ssh_key_path, info.known_hosts_path, head.ssh_port, key_type(head))
    return ["ssh", *opts, *mux_options(control), f"{info.ssh_user}@{head.public_ip}"]


def in_workdir(node: Any, script: str) -> str:
    wd = shlex.quote(node.workdir.rstrip("/") or ".")
    return f"mkdir -p {wd} && cd {wd} && exec sh -c {shlex.quote(script)}"


def head_known_hosts(info: ClusterRecord) -> str:
    """The workers' pinned host keys at the addresses the head reaches them by (private)."""
    return knownhosts.render(info.nodes[1:], public=False)


def worker_rows(info: ClusterRecord) -> list[str]:
    rows = []
    for n in info.nodes[1:]:
        wd = n.workdir.rstrip("/") or "."
        port = knownhosts.private_port(n)
        rows.append(f"{n.name} {info.ssh_user}@{n.private_ip} {port} {wd} {key_type(n)}")
    return rows


# On the head: the keys it was handed, and one persistent OpenSSH connection per worker. A
# socket path must stay within MAX_CONTROL_PATH (%C is 40 hex characters): when the keys folder
# is deep, the path relative to the workdir (where every head command runs, and OpenSSH takes
# it as given), never /tmp.
# The key exchange: OpenSSH's default sntrup761x25519 costs ~95 ms of the head's CPU per new
# worker connection (../shared/bench/fanout/RESULTS.md), 6x what curve25519 does; ML-KEM is
# cheap and kept where the head's ssh has it (naming it to an older ssh would fail).
# gpufleet's own direct connections (paramiko, to OpenSSH 9.2 sshds) negotiate curve25519.
HEAD_KEX = "curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256"
HEAD_ENV = [
    f"K=$(cd {HEAD_KEYS} && pwd) || exit 98",
    f'if [ ${{#K}} -le {LINUX_MAX_CONTROL_PATH - len("/m-") - 40} ]; then CP="$K/m-%C"; '
    f'else CP="{HEAD_KEYS}/m-%C"; fi',
    f"KEX={HEAD_KEX}",
    "if ssh -Q kex 2>/dev/null | grep -qx mlkem768x25519-sha256; then "
    'KEX="mlkem768x25519-sha256,$KEX"; fi',
    'RSH="ssh -F /dev/null -i $K/id_ed25519 '
    + " ".join(
        sshopts.as_args(
            sshopts.pinned("$K/known_hosts", None) + sshopts.TRANSPORT + [("KexAlgorithms", "$KEX")]
        )
    )
    + f' -o ControlPath=$CP -o ControlPersist={MUX_PERSIST_S}"',
    "export K CP RSH",
]


def prepare_script(info: ClusterRecord, *, warm: bool = True, require_rsync: bool = True) -> str:
    """sh for the head, the cluster key + workers' host keys on stdin (a tar).

    Exits 99 when the head has no rsync. Otherwise it also opens (in the background, while
    this machine uploads) a persistent connection to each worker that has none yet.
    """
    loop = (
        "while read -r name dest port wd kt; do "
        '{ $RSH -p "$port" -O check "$dest" || '
        '$RSH -p "$port" -o HostKeyAlgorithms="$kt" -o ControlMaster=yes -N -f "$dest"; } '
        "</dev/null >/dev/null 2>&1 & done"
    )
    return "\n".join(
        [
            "umask 077",
            f"mkdir -p {HEAD_KEYS} && tar -xf - -C {HEAD_KEYS} || exit 98",
            *HEAD_ENV,
            *([f"{loop} <<'EOF'", *worker_rows(info), "EOF"] if warm else []),
            *(["command -v rsync >/dev/null 2>&1 || exit 99"] if require_rsync else []),
            "",
        ]
    )


# Undoes what the head was handed, in its workdir: its worker connections exit and the keys go
# (on hosts the user has, the key is the user's own).
RELAY_CLEANUP = (
    f'for s in {HEAD_KEYS}/m-*; do [ -S "$s" ] && '
    'ssh -F /dev/null -o ControlPath="$s" -O exit gpufleet </dev/null >/dev/null 2>&1; '
    f"done; rm -rf {HEAD_KEYS}"
)


def remove_relay(info: ClusterInfo, timeout: float = 10.0) -> str | None:
    """Run RELAY_CLEANUP on the head; None, or why it could not (best effort)."""
    from gpufleet.remote import Group

    try:
        with Group(info, [info.nodes[0].name], connect_timeout=timeout) as g:
            g.wait_ready(timeout)
            r = g.run(RELAY_CLEANUP, check=False, timeout=timeout)[info.nodes[0].name]
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None if r.ok else (r.error or f"exit {r.exit_code}")


def head_files(info: ClusterRecord) -> dict[str, bytes | str]:
    return {
        "id_ed25519": Path(info.ssh_key_path).read_bytes(),
        "known_hosts": head_known_hosts(info),
    }


def stop_mux(info: ClusterRecord) -> None:
    """Close the kept connection to the head, if any (`down` calls this)."""
    import shutil

    from gpufleet.core import state

    control = control_path(state.cluster_dir(info.name))
    if control is None or not Path(control).exists() or not shutil.which("ssh"):
        return
    subprocess.run(
        [*head_ssh_argv(info, control)[:-1], "-O", "exit", head_ssh_argv(info, None)[-1]],
        capture_output=True,
        timeout=10,
    )


def popen(argv: list[str], stdin: bool = False) -> Any:
    """Start `argv`, stdout piped, stderr spooled to an unnamed temp file (read by
    stderr_text once stdout is done): a stderr pipe read only at the end would fill at
    64 KB and stall the writer before its stdout ends."""
    err = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stderr_text)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
    )
    proc.stderr = err
    return proc


def stderr_text(proc: Any) -> str:
    """What a popen() process wrote to stderr (call after its stdout ended)."""
    proc.wait()
    proc.stderr.seek(0)
    text = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return text


def head_run(info: ClusterRecord, control: str | None, script: str, stdin: bool = False) -> Any:
    node = info.nodes[0]
    return popen([*head_ssh_argv(info, control), in_workdir(node, script)], stdin=stdin)


def finish(proc: Any) -> tuple[int, str]:
    """Wait for a head command that prints little: (exit code, stderr)."""
    proc.stdout.read()
    code = proc.wait(timeout=120)
    return code, stderr_text(proc)


def start_prepare(info: ClusterRecord, control: str | None, script: str | None = None) -> Any:
    """Hand the head its keys (and warm its worker connections); finish() it later.

    Exit code 99: the head has no rsync. `script`: what the head runs instead of
    prepare_script(info), reading the keys' tar from stdin first.
    """
    import contextlib

    proc = head_run(info, control, prepare_script(info) if script is None else script, stdin=True)
    with contextlib.suppress(BrokenPipeError):
        proc.stdin.write(tar_files(head_files(info), mode=0o600))
    proc.stdin.close()
    return proc
