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
from gpufleet.provision.localprocs import _cmdline, stop_by_folder, stop_cluster_processes
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
                ndir = cdir / "nodes" / name
                host = generate_ed25519(f"{spec.name}-{name}")
                _write(ndir / "ssh_host_ed25519_key", host.private_openssh)
                _write(ndir / "ssh_host_ed25519_key.pub", host.public_openssh + "\n", 0o644)
                (ndir / "work").mkdir(parents=True, exist_ok=True)
                if spec.boot_lease_minutes:  # as a cloud node's bootcmd arms it (bootstrap.py)
                    lease = time.time() + spec.boot_lease_minutes * 60
                    _write(ndir / "lease", f"{lease:.0f}\n", 0o644)
                (ndir / "tmp").mkdir(mode=0o700, exist_ok=True)
                # first, as the recipe starts it on a cloud node (found by `down` by its folder)
                if (wpid := start_watcher(spec.name, cdir, name, ndir)) is not None:
                    watchers[name] = wpid
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
                procs[name] = start_sshd(sshd, conf, ndir / "sshd.log")
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
        """Not yet: issue 22 (jobs/recover.py) gives it a body."""
        from gpufleet.core.errors import CannotReplace

        raise CannotReplace(info.name, info.cloud, nodes)

    def status(self, info: ClusterInfo) -> dict[str, str]:
        cdir = state.cluster_dir(info.name)
        pids = info.provider.get("pids", {})
        return {
            n.name: "running"
            if pids.get(n.name) and str(cdir) in _cmdline(pids[n.name])
            else "stopped"
            for n in info.nodes
        }
