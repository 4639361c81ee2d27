"""A sandbox node's sshd: its loopback address and port, its config, its start and wait."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.core import state
from gpufleet.core.errors import GpufleetError, MissingTool
from gpufleet.provision import Progress

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import ClusterInfo

SSHD_INSTALL = (
    "install OpenSSH's server: `sudo apt-get install openssh-server` (Debian/Ubuntu), "
    "`sudo dnf install openssh-server` (Fedora/RHEL); macOS ships /usr/sbin/sshd"
)
START_TIMEOUT_S = 10.0
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def node_path() -> str:
    """PATH on a sandbox node: this environment's bin first (python, torchrun, pip)."""
    return f"{Path(sys.executable).parent}:{SYSTEM_PATH}"


def find_sshd() -> str:
    """Absolute path of sshd (sshd refuses to start from a relative path)."""
    found = shutil.which("sshd") or next(
        (p for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd") if os.access(p, os.X_OK)), None
    )
    if not found:
        raise MissingTool("sshd", SSHD_INSTALL)
    return found


def _addr_routes(addr: str) -> bool:
    with contextlib.suppress(OSError), socket.socket() as s:
        s.bind((addr, 0))
        return True
    return False


def _addresses_in_use() -> set[str]:
    used: set[str] = set()
    for name in state.names():
        with contextlib.suppress(Exception):
            used.update(n.private_ip for n in state.load(name).nodes)
    return used


def pick_addresses(count: int) -> list[str]:
    """`count` loopback addresses no other sandbox cluster uses (127.0.1.1 upward)."""
    used = _addresses_in_use()
    base = int(ipaddress.ip_address("127.0.1.1"))
    if not _addr_routes("127.0.1.1"):
        return ["127.0.0.1"] * count  # e.g. macOS: only 127.0.0.1; ports keep nodes apart
    out: list[str] = []
    i = 0
    while len(out) < count:
        addr = str(ipaddress.ip_address(base + i))
        i += 1
        if addr.endswith((".0", ".255")) or addr in used:
            continue
        out.append(addr)
        if base + i > int(ipaddress.ip_address("127.255.255.254")):
            raise GpufleetError("no free loopback address left for the sandbox")
    return out


def free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def sshd_config(
    *, addr: str, port: int, node_dir: Path, cluster_dir: Path, user: str, cluster: str, node: str
) -> str:
    """One sandbox node's sshd_config: key-only, no PAM/DNS, a clean non-login shell."""
    return "\n".join(
        [
            f"ListenAddress {addr}:{port}",
            f"HostKey {node_dir / 'ssh_host_ed25519_key'}",
            f"PidFile {node_dir / 'sshd.pid'}",
            f"AuthorizedKeysFile {cluster_dir / 'authorized_keys'}",
            f"AllowUsers {user}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "UseDNS no",
            "StrictModes no",
            "PrintMotd no",
            "X11Forwarding no",
            "MaxStartups 1000",
            "MaxSessions 1000",
            "LogLevel INFO",
            "Subsystem sftp internal-sftp",
            # Sessions carry the cluster name so `down` can find what a job left behind.
            # SHLVL=1 stops bash from sourcing ~/.bashrc for `ssh node cmd`: a sandbox node
            # should look like a fresh cloud node, not this machine's interactive shell.
            # PATH: the node image's python is the one gpufleet runs in (ranks, setup, exec).
            # TMPDIR: a cloud node has its own /tmp; sandbox nodes share this machine's and its
            # hostname, so tools that name temp paths by host collided between nodes (Open
            # MPI's orteds: "mkdir ... /tmp/ompi.<host>.<uid>/jf.N/0: File exists", and a
            # segfault writing the one hwloc.sm file they all mapped).
            f"SetEnv GPUFLEET_SANDBOX={cluster} GPUFLEET_NODE={node} SHLVL=1 "
            f"GPUFLEET_STATE_DIR={node_dir} PATH={node_path()} TMPDIR={node_dir / 'tmp'}",
            "",
        ]
    )


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def start_sshd(sshd: str, conf: Path, log_path: Path) -> subprocess.Popen:
    """sshd in the foreground (-D) of a new session, logging to `log_path`."""
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the daemon
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(conf)],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    log.close()
    return proc


def wait_listening(
    info: ClusterInfo, procs: dict[str, subprocess.Popen], progress: Progress
) -> None:
    """Until every node's sshd accepts connections; GpufleetError if one exits, or if none
    starts listening for START_TIMEOUT_S: the wait is for a stuck sshd, not a bound on the
    whole start, which grows with N (hundreds of sshds starting on a few cores)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = {n.name: n for n in info.nodes}
    while waiting:
        before = len(waiting)
        for name, node in list(waiting.items()):
            if procs[name].poll() is not None:
                log = Path(node.workdir).parent / "sshd.log"
                raise GpufleetError(
                    f"sandbox sshd for {name} exited with {procs[name].returncode}: "
                    + log.read_text(errors="replace").strip()[-500:]
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection((node.private_ip, node.ssh_port), timeout=0.2),
            ):
                del waiting[name]
        if len(waiting) < before:
            deadline = time.monotonic() + START_TIMEOUT_S
        elif waiting and time.monotonic() > deadline:
            raise GpufleetError(
                f"sandbox sshd not listening, and no other started for {START_TIMEOUT_S:.0f}s: "
                + ", ".join(list(waiting)[:10])
                + (f" and {len(waiting) - 10} more" if len(waiting) > 10 else "")
            )
        if waiting:
            time.sleep(0.01)
    progress(f"{len(info.nodes)} sandbox nodes listening")
