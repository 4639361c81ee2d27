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

import getpass
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo, node_names
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.hostkeyrotation import HostKeyRotation
from gpufleet.core import state
from gpufleet.provision import Progress
from gpufleet.provision.localpreempt import start_watcher
from gpufleet.provision.localprocs import (
    _cmdline,
    stop_by_folder,
    stop_cluster_processes,
    stop_node_processes,
)
from gpufleet.provision.localsshd import (
    _write,
    find_sshd,
    free_port,
    pick_addresses,
    sshd_config,
    start_sshd,
    wait_listening,
)
from gpufleet.provision.localwatchdog import _record_pids, start_watchdog
from gpufleet.remote import knownhosts
from gpufleet.remote.sshkeys import generate_ed25519

# Paths from a node's workdir (<node dir>/work); sshd -D re-executes itself on SIGHUP.
SANDBOX_HOST_KEYS = HostKeyRotation(
    key_file="../ssh_host_ed25519_key", reload='kill -HUP "$(cat ../sshd.pid)"', sudo=False
)


def _start_node(
    sshd: str,
    cdir: Path,
    cluster: str,
    name: str,
    addr: str,
    user: str,
    public: bool,
    boot_lease_minutes: int | None,
) -> tuple[NodeInfo, subprocess.Popen, int | None]:
    """One node: its folder, host key, lease, preemption watcher (tests) and sshd; the
    NodeInfo to record, the sshd, the watcher's pid."""
    ndir = cdir / "nodes" / name
    host = generate_ed25519(f"{cluster}-{name}")
    _write(ndir / "ssh_host_ed25519_key", host.private_openssh)
    _write(ndir / "ssh_host_ed25519_key.pub", host.public_openssh + "\n", 0o644)
    (ndir / "work").mkdir(parents=True, exist_ok=True)
    if boot_lease_minutes:  # as a cloud node's bootcmd arms it (bootstrap.py)
        _write(ndir / "lease", f"{time.time() + boot_lease_minutes * 60:.0f}\n", 0o644)
    (ndir / "tmp").mkdir(mode=0o700, exist_ok=True)
    # first, as the recipe starts it on a cloud node (found by `down` by its folder)
    watcher = start_watcher(cluster, cdir, name, ndir)
    port = free_port(addr)
    conf = ndir / "sshd_config"
    config = sshd_config(
        addr=addr, port=port, node_dir=ndir, cluster_dir=cdir, user=user, cluster=cluster, node=name
    )
    _write(conf, config, 0o644)
    proc = start_sshd(sshd, conf, ndir / "sshd.log")
    node = NodeInfo(
        name=name,
        private_ip=addr,
        # As on a cloud, only the head is "public" unless asked: the client is told no
        # address for a worker and reaches it through the head's sshd.
        public_ip=addr if public else None,
        ssh_port=port,
        gpus=0,
        workdir=str(ndir / "work"),
        host_key=" ".join(host.public_openssh.split()[:2]),
        bootstrap_host_key=True,
    )
    return node, proc, watcher


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
        watchers: dict[str, int] = {}  # preemption watchers, GPUFLEET_SANDBOX_METADATA only
        uid = secrets.token_hex(8)  # tells this cluster from an earlier one of the same name
        expires_at = spec.expiry()
        try:
            if expires_at:
                _write(cdir / "expires_at", f"{expires_at:.0f}\n", 0o644)
            # The watchdog first: from here on, nothing this cluster starts can outlive it.
            pids["watchdog"] = start_watchdog(spec.name, cdir, uid)
            _record_pids(cdir, pids)
            for i, (name, addr) in enumerate(zip(node_names(spec.nodes), addresses, strict=True)):
                public = i == 0 or spec.public_workers
                node, procs[name], wpid = _start_node(
                    sshd, cdir, spec.name, name, addr, user, public, spec.boot_lease_minutes
                )
                if wpid is not None:
                    watchers[name] = wpid
                pids[name] = procs[name].pid
                _record_pids(cdir, pids)  # recorded before anything else can be lost
                nodes.append(node)
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
                    **({"preempt": watchers} if watchers else {}),
                },
                # The generated key plays the bootstrap key a cloud node gets in its user data;
                # the first contact replaces it with one made on the node (remote/hostkeys.py).
                host_key_rotation=SANDBOX_HOST_KEYS,
            )
            _write(cdir / "known_hosts", knownhosts.render(info.nodes), 0o644)
            state.save(info)  # recorded before waiting, so `down` can always find the PIDs
            wait_listening(info, procs, progress)
            return info
        except BaseException:
            stop_cluster_processes(spec.name, cdir)
            state.forget(spec.name)
            raise

    def down(self, info: ClusterInfo, progress: Progress) -> None:
        stop_by_folder(info.name)
        progress(f"stopped {len(info.nodes)} sandbox nodes")

    def extend(self, info: ClusterInfo, expires_at: float) -> None:
        """Move the hard expiry the watchdog reads: in each node's state folder over SSH, as on
        a cloud (provision/nodeexpiry.py), then the cluster's file (the watchdog's fallback)."""
        from gpufleet.provision.nodeexpiry import write_node_expiry

        write_node_expiry(info, expires_at)
        _write(state.cluster_dir(info.name) / "expires_at", f"{expires_at:.0f}\n", 0o644)

    def replace(self, info: ClusterInfo, nodes: list[str], progress: Progress) -> ClusterInfo:
        """New nodes for `nodes`: whatever of the old ones is left stopped (its sshd by pid,
        its sessions by their markers), its folder removed (a new machine has an empty disk),
        then a new sshd with a new host key on the same address (a new port), recorded before
        it is waited for."""
        cdir = state.cluster_dir(info.name)
        spec = state.load_spec(info.name)
        boot_lease = spec.boot_lease_minutes if spec is not None else None
        sshd = info.provider.get("sshd") or find_sshd()
        pids = dict(info.provider.get("pids", {}))
        watchers = dict(info.provider.get("preempt", {}))
        procs: dict[str, subprocess.Popen] = {}
        new: dict[str, NodeInfo] = {}
        started = time.monotonic()
        for name in nodes:
            old = info.node(name)
            stop_node_processes(info.name, name, pids.get(name), cdir)
            shutil.rmtree(cdir / "nodes" / name, ignore_errors=True)
            public = old.public_ip is not None
            new[name], procs[name], wpid = _start_node(
                sshd, cdir, info.name, name, old.private_ip, info.ssh_user, public, boot_lease
            )
            if wpid is not None:
                watchers[name] = wpid
            pids[name] = procs[name].pid
            _record_pids(cdir, {**pids, "watchdog": info.provider.get("watchdog", 0)})
        info = info.model_copy(
            update={
                "nodes": [new.get(n.name, n) for n in info.nodes],
                "provider": {
                    **info.provider,
                    "pids": pids,
                    **({"preempt": watchers} if watchers else {}),
                },
            }
        )
        _write(cdir / "known_hosts", knownhosts.render(info.nodes), 0o644)
        state.save(info)  # before waiting: `down` and the watchdog see the new pids
        fresh = info.model_copy(update={"nodes": [new[n] for n in nodes]})
        wait_listening(fresh, procs, progress)
        progress(f"replaced {', '.join(nodes)} in {time.monotonic() - started:.1f}s")
        return info

    def status(self, info: ClusterInfo) -> dict[str, str]:
        cdir = state.cluster_dir(info.name)
        pids = info.provider.get("pids", {})
        return {
            n.name: "running"
            if pids.get(n.name) and str(cdir) in _cmdline(pids[n.name])
            else "stopped"
            for n in info.nodes
        }
