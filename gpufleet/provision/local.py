"""The local sandbox cloud: each node is its own OpenSSH sshd on a loopback address.

Nodes listen on 127.0.1.K (or 127.0.0.1 with distinct ports where other loopback
addresses do not route), each with its own ed25519 host key and working directory;
one per-cluster user key is authorized. known_hosts is written from the generated
host keys before anything connects. `down` stops exactly the processes it started
(by PID, checked against their command line), any process a job left behind (found
by the GPUFLEET_SANDBOX variable sshd sets in every session), and removes the files.
A watchdog process per cluster is the nodes' own expiry, as the cloud-init timer is on a
real node: it removes each node at min(hard expiry, lease), where the lease is the epoch
seconds a live `run` keeps writing to the node's state directory (GPUFLEET_STATE_DIR).
Sessions get the PATH of the environment gpufleet runs from, as a node image's python.
"""

from __future__ import annotations

import contextlib
import getpass
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo, node_names
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.hostkeyrotation import HostKeyRotation
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError, MissingTool
from gpufleet.provision import Progress
from gpufleet.remote import knownhosts
from gpufleet.remote.sshkeys import generate_ed25519

SSHD_INSTALL = (
    "install OpenSSH's server: `sudo apt-get install openssh-server` (Debian/Ubuntu), "
    "`sudo dnf install openssh-server` (Fedora/RHEL); macOS ships /usr/sbin/sshd"
)
START_TIMEOUT_S = 10.0
WATCH_EVERY_S = float(os.environ.get("GPUFLEET_WATCHDOG_EVERY_S", 2.0))
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Paths from a node's workdir (<node dir>/work); sshd -D re-executes itself on SIGHUP.
SANDBOX_HOST_KEYS = HostKeyRotation(
    key_file="../ssh_host_ed25519_key", reload='kill -HUP "$(cat ../sshd.pid)"', sudo=False
)


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


def sandbox_processes(cluster: str, node: str | None = None) -> list[int]:
    """PIDs of sessions (and their children) that sandbox sshd started for this cluster.

    The name alone is not enough: another $GPUFLEET_HOME (another user's tests, say) may
    have a cluster of the same name, so the session's state dir must be under ours.
    """
    markers = {f"GPUFLEET_SANDBOX={cluster}".encode()}
    if node:
        markers.add(f"GPUFLEET_NODE={node}".encode())
    ours = f"GPUFLEET_STATE_DIR={state.cluster_dir(cluster)}/".encode()
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            env = (p / "environ").read_bytes().split(b"\0")
            if markers <= set(env) and any(e.startswith(ours) for e in env):
                found.append(int(p.name))
    return [pid for pid in found if pid != os.getpid()]


def folder_processes(cluster_dir: Path) -> list[int]:
    """PIDs whose command line names the cluster's folder: its sshds and its watchdog."""
    marker = str(cluster_dir) + "/"
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if marker in cmd + "/" and int(p.name) != os.getpid():
                found.append(int(p.name))
    return found


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


def stop_cluster_processes(cluster: str, cluster_dir: Path) -> None:
    """Stop a sandbox cluster's sshds and watchdog and every session process.

    Found by the folder their command line names, not by recorded PIDs: a damaged or
    half-written state file still leaves nothing running, and a reused PID is never hit.
    """
    ours = sorted(folder_processes(cluster_dir))
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
        uid = secrets.token_hex(8)  # tells this cluster from an earlier one of the same name
        expires_at = spec.expiry()
        try:
            if expires_at:
                _write(cdir / "expires_at", f"{expires_at:.0f}\n", 0o644)
            # The watchdog first: from here on, nothing this cluster starts can outlive it.
            pids["watchdog"] = start_watchdog(spec.name, cdir, uid)
            _record_pids(cdir, pids)
            for i, (name, addr) in enumerate(zip(node_names(spec.nodes), addresses, strict=True)):
                ndir = cdir / "nodes" / name
                host = generate_ed25519(f"{spec.name}-{name}")
                _write(ndir / "ssh_host_ed25519_key", host.private_openssh)
                _write(ndir / "ssh_host_ed25519_key.pub", host.public_openssh + "\n", 0o644)
                (ndir / "work").mkdir(parents=True, exist_ok=True)
                (ndir / "tmp").mkdir(mode=0o700, exist_ok=True)
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
                _record_pids(cdir, pids)  # recorded before anything else can be lost
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
                expires_at=expires_at,
                env={"GLOO_SOCKET_IFNAME": "lo"},
                provider={
                    "pids": {k: v for k, v in pids.items() if k != "watchdog"},
                    "sshd": sshd,
                    "watchdog": pids["watchdog"],
                    "uid": uid,
                },
                # The generated key plays the bootstrap key a cloud node gets in its user data;
                # the first contact replaces it with one made on the node (remote/hostkeys.py).
                host_key_rotation=SANDBOX_HOST_KEYS,
            )
            _write(cdir / "known_hosts", knownhosts.render(info.nodes), 0o644)
            state.save(info)  # recorded before waiting, so `down` can always find the PIDs
            self._wait_listening(info, procs, progress)
            return info
        except BaseException:
            stop_cluster_processes(spec.name, cdir)
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
        stop_by_folder(info.name)
        progress(f"stopped {len(info.nodes)} sandbox nodes")

    def extend(self, info: ClusterInfo, expires_at: float) -> None:
        """Move the hard expiry the watchdog reads: in each node's state folder over SSH, as on
        a cloud (provision/nodeexpiry.py), then the cluster's file (the watchdog's fallback)."""
        from gpufleet.provision.nodeexpiry import write_node_expiry

        write_node_expiry(info, expires_at)
        _write(state.cluster_dir(info.name) / "expires_at", f"{expires_at:.0f}\n", 0o644)

    def status(self, info: ClusterInfo) -> dict[str, str]:
        cdir = state.cluster_dir(info.name)
        pids = info.provider.get("pids", {})
        return {
            n.name: "running"
            if pids.get(n.name) and str(cdir) in _cmdline(pids[n.name])
            else "stopped"
            for n in info.nodes
        }


def _record_pids(cdir: Path, pids: dict[str, int]) -> None:
    """pids.json beside the state: the watchdog's nodes when cluster.json is missing or damaged."""
    tmp = cdir / f"pids.json.{os.getpid()}.tmp"
    _write(tmp, json.dumps(pids))
    os.replace(tmp, cdir / "pids.json")


def recorded_pids(cdir: Path) -> dict[str, int]:
    with contextlib.suppress(OSError, ValueError, TypeError):
        data = json.loads((cdir / "pids.json").read_text())
        return {str(k): int(v) for k, v in data.items()}
    return {}


def stop_by_folder(cluster: str) -> None:
    """Stop everything of a sandbox cluster: what its folder names and its sessions."""
    stop_cluster_processes(cluster, state.cluster_dir(cluster))


def stray_processes() -> list[int]:
    """sshds and watchdogs (with their sessions) of sandbox clusters whose folder is gone."""
    root = str(state.home() / "clusters") + "/"
    out: list[int] = []
    for p in Path("/proc").glob("[0-9]*"):
        cmd = _cmdline(int(p.name))
        if root not in cmd or int(p.name) == os.getpid():
            continue
        name = cmd.split(root, 1)[1].split("/", 1)[0].split()[0]
        if name and not (state.home() / "clusters" / name).is_dir():
            out.append(int(p.name))
            out.extend(_descendants(int(p.name)))
    return sorted(set(out))


def start_watchdog(cluster: str, cdir: Path, uid: str) -> int:
    """A detached process that removes each sandbox node at min(hard expiry, its lease)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpufleet.provision.local", "watchdog", cluster, f"{cdir}/", uid],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "GPUFLEET_HOME": str(state.home())},
    )
    return proc.pid


def _read_epoch(path: Path) -> float | None:
    with contextlib.suppress(OSError, ValueError):
        return float(path.read_text().split()[0])
    return None


def _node_deadline(cdir: Path, node: str) -> float | None:
    """When a node removes itself: min(hard expiry, lease); None: never. As on a cloud node
    (images/ttl/gpufleet-expire), a hard expiry `extend` wrote to the node's own state
    directory replaces the one it was created with."""
    ndir = cdir / "nodes" / node
    hard = _read_epoch(ndir / "expires_at")
    if hard is None:
        hard = _read_epoch(cdir / "expires_at")
    ends = [t for t in (hard, _read_epoch(ndir / "lease")) if t is not None]
    return min(ends) if ends else None


def _stop_node(cluster: str, cdir: Path, node: str, pid: int | None, when: float) -> None:
    ndir = cdir / "nodes" / node
    with contextlib.suppress(OSError):
        (ndir / "expired").write_text(f"{when:.0f}\n")
    ours = [pid] if pid and str(cdir) in _cmdline(pid) else []
    procs = set(sandbox_processes(cluster, node))
    for p in ours:
        procs.update(_descendants(p))
    terminate(sorted(procs) + ours, grace_s=2.0)


def _watchdog(cluster: str, cdir: Path, uid: str) -> None:
    """The sandbox nodes' own expiry; ends when its cluster is gone or was replaced."""
    stopped: set[str] = set()
    unreadable = 0
    while True:
        time.sleep(WATCH_EVERY_S)
        if not cdir.is_dir():
            return  # `down` removed the cluster
        try:
            data = json.loads((cdir / "cluster.json").read_text())
            unreadable = 0
        except (OSError, ValueError):
            # still being created, or damaged: give creation time, then go on pids.json
            unreadable += 1
            data = {"provider": {"uid": uid, "pids": recorded_pids(cdir)}, "nodes": []}
            if unreadable * WATCH_EVERY_S < 60:
                continue
        if data.get("provider", {}).get("uid") != uid:
            return  # a newer cluster of the same name: not ours to remove
        pids = {k: v for k, v in data["provider"].get("pids", {}).items() if k != "watchdog"}
        names = [n["name"] for n in data.get("nodes", [])] or sorted(pids)
        now = time.time()
        for node in names:
            when = _node_deadline(cdir, node)
            if node not in stopped and when is not None and now >= when:
                _stop_node(cluster, cdir, node, pids.get(node), when)
                stopped.add(node)
        if names and stopped >= set(names):
            stop_cluster_processes(cluster, cdir)
            ends = [t for node in names if (t := _node_deadline(cdir, node)) is not None]
            state.forget(cluster, expired=max(ends, default=now))
            return


if __name__ == "__main__" and sys.argv[1:2] == ["watchdog"]:
    _watchdog(sys.argv[2], Path(sys.argv[3].rstrip("/")), sys.argv[4])
