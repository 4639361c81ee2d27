"""The local sandbox cloud: each node is its own OpenSSH sshd on a loopback address.

Nodes listen on 127.0.1.K (or 127.0.0.1 with distinct ports where other loopback
addresses do not route), each with its own ed25519 host key and working directory;
one per-cluster user key is authorized. known_hosts is written from the generated
host keys before anything connects. `down` stops exactly the processes it started
(by PID, checked against their command line), any process a job left behind (found
by the GPUFLEET_SANDBOX variable sshd sets in every session), and removes the files.
A watchdog process per cluster does the same at the TTL if the CLI never comes back.
"""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from components.spec import ClusterInfo, ClusterSpec, HostKeyRotation, NodeInfo, node_names
from gpufleet import state
from gpufleet.errors import GpufleetError, MissingTool
from gpufleet.provision import Progress
from gpufleet.sshkeys import generate_ed25519

SSHD_INSTALL = (
    "install OpenSSH's server: `sudo apt-get install openssh-server` (Debian/Ubuntu), "
    "`sudo dnf install openssh-server` (Fedora/RHEL); macOS ships /usr/sbin/sshd"
)
START_TIMEOUT_S = 10.0
# Paths from a node's workdir (<node dir>/work); sshd -D re-executes itself on SIGHUP.
SANDBOX_HOST_KEYS = HostKeyRotation(
    key_file="../ssh_host_ed25519_key", reload='kill -HUP "$(cat ../sshd.pid)"', sudo=False
)


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
            f"SetEnv GPUFLEET_SANDBOX={cluster} GPUFLEET_NODE={node} SHLVL=1",
            "",
        ]
    )


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
    return True


def _children(pid: int) -> list[int]:
    kids = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int((p / "stat").read_text().split(")")[-1].split()[1]) == pid:
                kids.append(int(p.name))
    return kids


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for kid in _children(todo.pop()):
            out.append(kid)
            todo.append(kid)
    return out


def sandbox_processes(cluster: str) -> list[int]:
    """PIDs of sessions (and their children) that sandbox sshd started for this cluster."""
    marker = f"GPUFLEET_SANDBOX={cluster}".encode()
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if marker in (p / "environ").read_bytes().split(b"\0"):
                found.append(int(p.name))
    return [pid for pid in found if pid != os.getpid()]


def terminate(pids: list[int], grace_s: float = 3.0) -> None:
    """SIGTERM, wait for exit up to grace_s, then SIGKILL whatever is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = [p for p in pids if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _alive(p)]
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def stop_cluster_processes(cluster: str, pids: dict[str, int], cluster_dir: Path) -> None:
    """Stop a sandbox cluster's sshds (only if they are still ours) and every session process."""
    ours = [pid for pid in pids.values() if str(cluster_dir) in _cmdline(pid)]
    sessions = set(sandbox_processes(cluster))
    for pid in ours:
        sessions.update(_descendants(pid))
    terminate(sorted(sessions) + ours)
    leftovers = sandbox_processes(cluster)
    if leftovers:
        terminate(leftovers, grace_s=1.0)


class LocalProvisioner:
    """`--cloud local`: N sshd nodes on loopback; no root and no cloud account needed."""

    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo:
        sshd = find_sshd()
        cdir = state.cluster_dir(spec.name)
        user = getpass.getuser()
        user_key = generate_ed25519(f"gpufleet-{spec.name}")
        _write(cdir / "id_ed25519", user_key.private_openssh)
        _write(cdir / "id_ed25519.pub", user_key.public_openssh + "\n", 0o644)
        _write(cdir / "authorized_keys", user_key.public_openssh + "\n", 0o644)
        if os.geteuid() == 0:
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privsep dir, as root

        addresses = pick_addresses(spec.nodes)
        nodes: list[NodeInfo] = []
        procs: dict[str, subprocess.Popen] = {}
        pids: dict[str, int] = {}
        try:
            for i, (name, addr) in enumerate(zip(node_names(spec.nodes), addresses, strict=True)):
                ndir = cdir / "nodes" / name
                host = generate_ed25519(f"{spec.name}-{name}")
                _write(ndir / "ssh_host_ed25519_key", host.private_openssh)
                _write(ndir / "ssh_host_ed25519_key.pub", host.public_openssh + "\n", 0o644)
                (ndir / "work").mkdir(parents=True, exist_ok=True)
                port = free_port(addr)
                conf = ndir / "sshd_config"
                _write(
                    conf,
                    sshd_config(
                        addr=addr,
                        port=port,
                        node_dir=ndir,
                        cluster_dir=cdir,
                        user=user,
                        cluster=spec.name,
                        node=name,
                    ),
                    0o644,
                )
                log = open(ndir / "sshd.log", "ab")  # noqa: SIM115 - handed to the daemon
                procs[name] = subprocess.Popen(
                    [sshd, "-D", "-e", "-f", str(conf)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
                log.close()
                pids[name] = procs[name].pid
                nodes.append(
                    NodeInfo(
                        name=name,
                        private_ip=addr,
                        # As on a cloud, only the head is "public" unless asked: the client is
                        # told no address for a worker and reaches it through the head's sshd.
                        public_ip=addr if i == 0 or spec.public_workers else None,
                        ssh_port=port,
                        gpus=0,
                        workdir=str(ndir / "work"),
                        host_key=" ".join(host.public_openssh.split()[:2]),
                        bootstrap_host_key=True,
                    )
                )
            info = ClusterInfo(
                name=spec.name,
                cloud="local",
                instance_type="local",
                nodes=nodes,
                ssh_user=user,
                ssh_key_path=str(cdir / "id_ed25519"),
                known_hosts_path=str(cdir / "known_hosts"),
                fabric="none",
                python=sys.executable,
                expires_at=spec.expiry(),
                env={"GLOO_SOCKET_IFNAME": "lo"},
                provider={"pids": pids, "sshd": sshd},
                # The generated key plays the bootstrap key a cloud node gets in its user data;
                # the first contact replaces it with one made on the node (remote/hostkeys.py).
                host_key_rotation=SANDBOX_HOST_KEYS,
            )
            _write(cdir / "known_hosts", known_hosts(info), 0o644)
            state.save(info)  # recorded before waiting, so `down` can always find the PIDs
            self._wait_listening(info, procs, progress)
            if info.expires_at:
                info.provider["watchdog"] = start_watchdog(spec.name, info.expires_at)
                state.save(info)
            return info
        except BaseException:
            stop_cluster_processes(spec.name, pids, cdir)
            state.forget(spec.name)
            raise

    def _wait_listening(
        self, info: ClusterInfo, procs: dict[str, subprocess.Popen], progress: Progress
    ) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = {n.name: n for n in info.nodes}
        while waiting:
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
            if waiting and time.monotonic() > deadline:
                raise GpufleetError(
                    f"sandbox sshd not listening after {START_TIMEOUT_S}s: " + ", ".join(waiting)
                )
            if waiting:
                time.sleep(0.01)
        progress(f"{len(info.nodes)} sandbox nodes listening")

    def down(self, info: ClusterInfo, progress: Progress) -> None:
        cdir = state.cluster_dir(info.name)
        watchdog = info.provider.get("watchdog")
        if (
            watchdog
            and int(watchdog) != os.getpid()
            and "gpufleet.provision.local" in _cmdline(int(watchdog))
        ):
            terminate([int(watchdog)], grace_s=1.0)
        stop_cluster_processes(info.name, info.provider.get("pids", {}), cdir)
        progress(f"stopped {len(info.nodes)} sandbox nodes")

    def status(self, info: ClusterInfo) -> dict[str, str]:
        cdir = state.cluster_dir(info.name)
        pids = info.provider.get("pids", {})
        return {
            n.name: "running"
            if pids.get(n.name) and str(cdir) in _cmdline(pids[n.name])
            else "stopped"
            for n in info.nodes
        }


def known_hosts(info: ClusterInfo) -> str:
    """known_hosts lines pinning each node's host key at its address and port."""
    from gpufleet.remote.knownhosts import render

    return render(info.nodes)


def start_watchdog(cluster: str, expires_at: float) -> int:
    """A detached process that tears the sandbox cluster down at its expiry time."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.provision.local", "watchdog", cluster, str(expires_at)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "GPUFLEET_HOME": str(state.home())},
    )
    return proc.pid


def _watchdog(cluster: str, expires_at: float) -> None:
    while (left := expires_at - time.time()) > 0:
        time.sleep(min(left, 60))
    with contextlib.suppress(Exception):
        info = state.load(cluster)
        LocalProvisioner().down(info, lambda _m: None)
        state.forget(cluster)


if __name__ == "__main__" and sys.argv[1:2] == ["watchdog"]:
    _watchdog(sys.argv[2], float(sys.argv[3]))
