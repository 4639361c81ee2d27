"""`--cloud vm`: QEMU virtual machines that boot the exact cloud-init a cloud node gets, offline.

Each node is one `qemu-system-x86_64` process booting a copy-on-write overlay of the cached
Debian image (gpufleet/provision/vmimage.py) with a NoCloud seed ISO holding the output of the
same `render_cloud_init` call the AWS/GCP/Azure components make. Two NICs: user-mode networking
with `restrict=on` (no outside address is reachable) and SSH forwarded from 127.0.0.1, and a
private L2 segment between the cluster's nodes (QEMU socket multicast on loopback) with static
addresses, which torchrun/gloo uses. `down` stops exactly the QEMU processes it started, by PID.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo, node_names
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.hostkeyrotation import HostKeyRotation
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError
from gpufleet.provision import Progress
from gpufleet.provision.localprocs import _alive, _cmdline, folder_processes, terminate
from gpufleet.provision.localsshd import _write, free_port
from gpufleet.provision.vmimage import (
    GUEST_PYTHON_DIR,
    PYTHON_SHARE_TAG,
    BaseImage,
    ensure_image,
    python_share,
    require_tools,
)
from gpufleet.remote import knownhosts
from gpufleet.remote.sshkeys import generate_ed25519

PRIVATE_NET = "10.77.0"  # /24; node K is .(K+10)
PUBLIC_GUEST_IP = "10.0.2.15"  # QEMU user-mode networking's guest address
MEMORY_MB = 1536  # torch's import and a small DDP job fit; several VMs fit on a laptop
SLOW_COMMAND_S = 180.0  # one short command on a TCG guest (software emulation, busy booting)
BOOT_TIMEOUT_S = float(os.environ.get("GPUFLEET_VM_BOOT_TIMEOUT", "1200"))


def private_ip(index: int) -> str:
    return f"{PRIVATE_NET}.{index + 10}"


def mac(segment: int, index: int) -> str:
    """Locally administered MACs: segment 1 = user-mode NIC, 2 = private segment."""
    return f"52:54:00:{segment:02x}:{index // 256:02x}:{index % 256:02x}"


def meta_data(node: str, instance_id: str) -> str:
    """NoCloud meta-data: a stable instance id per VM, so a reboot is not a first boot."""
    return f"instance-id: {instance_id}\nlocal-hostname: {node}\n"


def network_config(index: int) -> str:
    """NoCloud network-config (v1): static eth0 on user-mode networking, eth1 private.

    No nameserver: a download fails at once with "could not resolve host", as on a cloud
    node without egress (only more quickly).
    """
    doc = {
        "version": 1,
        "config": [
            {
                "type": "physical",
                "name": "eth0",
                "mac_address": mac(1, index),
                "subnets": [
                    {"type": "static", "address": f"{PUBLIC_GUEST_IP}/24", "gateway": "10.0.2.2"}
                ],
            },
            {
                "type": "physical",
                "name": "eth1",
                "mac_address": mac(2, index),
                "subnets": [{"type": "static", "address": f"{private_ip(index)}/24"}],
            },
        ],
    }
    return json.dumps(doc, indent=2) + "\n"  # JSON is YAML


def qemu_argv(
    *,
    qemu: str,
    accel: str,
    image: BaseImage,
    node: str,
    index: int,
    node_dir: Path,
    ssh_port: int,
    segment_port: int,
    python_dir: Path | None,
    memory_mb: int = MEMORY_MB,
) -> list[str]:
    """One node's QEMU command line."""
    cpu = ["-accel", "kvm", "-cpu", "host", "-smp", "2"] if accel == "kvm" else []
    cpu = cpu or ["-accel", "tcg", "-cpu", "max", "-smp", "1"]
    argv = [
        qemu,
        "-name",
        f"gpufleet-{node}",
        *cpu,
        "-m",
        str(memory_mb),
        "-nodefaults",
        "-display",
        "none",
        "-chardev",
        f"file,id=console,path={node_dir / 'console.log'},append=on",
        "-serial",
        "chardev:console",
        "-kernel",
        str(image.kernel),
        "-initrd",
        str(image.initrd),
        "-append",
        "root=/dev/vda rw console=ttyS0 net.ifnames=0 ds=nocloud",
        "-drive",
        f"file={node_dir / 'disk.qcow2'},if=virtio,format=qcow2",
        "-drive",
        f"file={node_dir / 'seed.iso'},if=virtio,format=raw,readonly=on",
        "-netdev",
        f"user,id=pub,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22",
        "-device",
        f"virtio-net-pci,netdev=pub,mac={mac(1, index)}",
        "-netdev",
        f"socket,id=priv,mcast=230.0.77.1:{segment_port},localaddr=127.0.0.1",
        "-device",
        f"virtio-net-pci,netdev=priv,mac={mac(2, index)}",
        "-pidfile",
        str(node_dir / "qemu.pid"),
    ]
    if python_dir is not None:
        argv += [
            "-virtfs",
            f"local,path={python_dir},mount_tag={PYTHON_SHARE_TAG},security_model=none,readonly=on",
        ]
    return argv


@functools.cache
def pick_accel(qemu: str, kernel: str) -> str:
    """kvm when a kernel actually starts under it (it can fail in two ways here), else tcg."""
    forced = os.environ.get("GPUFLEET_VM_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    # A kernel with no root disk prints its banner at once under a working KVM.
    proc = subprocess.Popen(
        [qemu, "-accel", "kvm", "-cpu", "host", "-m", "256", "-nodefaults", "-display", "none"]
        + ["-serial", "stdio", "-no-reboot", "-kernel", kernel, "-append", "console=ttyS0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        out = b""
        deadline = time.monotonic() + 8
        os.set_blocking(proc.stdout.fileno(), False)  # type: ignore[union-attr]
        while time.monotonic() < deadline and proc.poll() is None and b"Linux version" not in out:
            time.sleep(0.1)
            out += proc.stdout.read() or b""  # type: ignore[union-attr]
        return "kvm" if b"Linux version" in out else "tcg"
    finally:
        proc.kill()
        proc.wait()


def _seed_iso(genisoimage: str, node_dir: Path, files: dict[str, str]) -> None:
    seed = node_dir / "seed"
    seed.mkdir(exist_ok=True)
    for name, text in files.items():
        _write(seed / name, text)
    subprocess.run(
        [genisoimage, "-quiet", "-output", str(node_dir / "seed.iso"), "-volid", "cidata"]
        + ["-joliet", "-rock", *(str(seed / n) for n in files)],
        check=True,
        capture_output=True,
    )
    shutil.rmtree(seed)  # it holds the node's host private key


def _banner(port: int) -> bool:
    """True when a real sshd answers on the forwarded port (QEMU accepts before the guest does)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.settimeout(3)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def _ours(pid: int, cdir: Path) -> bool:
    return bool(pid) and _alive(pid) and str(cdir) in _cmdline(pid)


@dataclass
class _Boot:
    """What every node of one cluster boots with; start() boots one (up, and replace)."""

    tools: dict[str, str]
    image: BaseImage
    python_dir: Path | None
    accel: str
    cluster: str
    cdir: Path
    node_count: int
    ssh_user: str
    user_public_key: str
    expires_at: float | None
    boot_lease_s: int | None
    segment_port: int

    def start(self, index: int, extra: dict[str, str], port: int = 0) -> tuple[int, NodeInfo]:
        """Seed (a new host key, a new instance id: cloud-init runs as on a first boot),
        overlay and QEMU for node `index`; its PID and record. `port`: the forwarded SSH port
        to reuse where it is free."""
        from gpufleet.components.bootstrap import BootstrapContext, render_cloud_init

        name = f"node-{index}"
        ndir = self.cdir / "nodes" / name
        ndir.mkdir(parents=True, exist_ok=True)
        host = generate_ed25519(f"{self.cluster}-{name}")
        instance_id = f"{self.cluster}-{name}-{secrets.token_hex(4)}"
        ctx = BootstrapContext(
            cluster=self.cluster,
            cloud="vm",
            instance_type="vm",
            node_index=index,
            node_count=self.node_count,
            ssh_user=self.ssh_user,
            user_public_key=self.user_public_key,
            host_private_key=host.private_openssh,
            host_public_key=host.public_openssh,
            fabric="none",
            expires_at=self.expires_at,
            extra=extra,
            boot_lease_s=self.boot_lease_s,
        )
        _seed_iso(
            self.tools["genisoimage"],
            ndir,
            {
                "user-data": render_cloud_init(ctx),
                "meta-data": meta_data(name, instance_id),
                "network-config": network_config(index),
            },
        )
        subprocess.run(
            [self.tools["qemu-img"], "create", "-q", "-f", "qcow2", "-F", "raw"]
            + ["-b", str(self.image.disk), str(ndir / "disk.qcow2")],
            check=True,
            capture_output=True,
        )
        port = port if port and _port_free(port) else free_port("127.0.0.1")
        argv = qemu_argv(
            qemu=self.tools["qemu-system-x86_64"],
            accel=self.accel,
            image=self.image,
            node=f"{self.cluster}-{name}",
            index=index,
            node_dir=ndir,
            ssh_port=port,
            segment_port=self.segment_port,
            python_dir=self.python_dir,
        )
        with open(ndir / "qemu.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C reaches us, not the VMs: `down` stops them
            )
        return (
            proc.pid,
            NodeInfo(
                name=name,
                private_ip=private_ip(index),
                public_ip="127.0.0.1",
                ssh_port=port,  # forwarded on 127.0.0.1
                private_ssh_port=22,  # sshd's own port, where the other VMs reach it
                gpus=0,
                host_key=" ".join(host.public_openssh.split()[:2]),
                instance_id=instance_id,  # the seed's: a new one makes cloud-init run again
                # As on a cloud: the key in the user data is replaced on first contact.
                bootstrap_host_key=True,
            ),
        )


class VmProvisioner:
    """`--cloud vm`: one QEMU VM per node, booted with the node's real cloud-init."""

    def __init__(self, node_env: dict[str, dict[str, str]] | None = None, **_: object):
        # Extra node env by node name (tests force a recipe step to fail with it).
        self.node_env = node_env or {}

    def up(self, spec: ClusterSpec, progress: Progress) -> ClusterInfo:
        from gpufleet.components.bootstrap import boot_lease_s

        tools = require_tools()
        image = ensure_image(progress)
        pydir = python_share(progress)
        accel = pick_accel(tools["qemu-system-x86_64"], str(image.kernel))
        slow = "" if accel == "kvm" else " (software emulation: ~100 s or more per boot)"
        progress(f"booting {spec.nodes} VMs with {accel.upper()}{slow}")
        cdir = state.cluster_dir(spec.name)
        user = spec.effective_ssh_user or "gpufleet"
        user_key = generate_ed25519(f"gpufleet-{spec.name}")
        _write(cdir / "id_ed25519", user_key.private_openssh)
        _write(cdir / "id_ed25519.pub", user_key.public_openssh + "\n", 0o644)
        boot = _Boot(
            tools=tools,
            image=image,
            python_dir=pydir,
            accel=accel,
            cluster=spec.name,
            cdir=cdir,
            node_count=spec.nodes,
            ssh_user=user,
            user_public_key=user_key.public_openssh,
            expires_at=spec.expiry(),
            boot_lease_s=boot_lease_s(spec),
            segment_port=free_udp_port(),
        )
        pids: dict[str, int] = {}
        nodes: list[NodeInfo] = []
        try:
            for index, name in enumerate(node_names(spec.nodes)):
                pids[name], node = boot.start(index, self.node_env.get(name, {}))
                nodes.append(node)
            info = ClusterInfo(
                name=spec.name,
                cloud="vm",
                instance_type="vm",
                nodes=nodes,
                ssh_user=user,
                ssh_key_path=str(cdir / "id_ed25519"),
                known_hosts_path=str(cdir / "known_hosts"),
                fabric="none",
                python="python3",
                expires_at=boot.expires_at,
                env={"GLOO_SOCKET_IFNAME": "eth1", "PYTHONPATH": GUEST_PYTHON_DIR},
                provider={"pids": pids, "accel": accel, "image": str(image.dir)}
                # replace() boots a node onto the same segment, with the same boot lease.
                | {"segment_port": boot.segment_port, "boot_lease_s": boot.boot_lease_s}
                # Under TCG a node still booting took over 20 s (the default) for one short
                # sudo write: lease and extend gave up while the write was still arriving.
                | ({"command_timeout_s": SLOW_COMMAND_S} if accel == "tcg" else {}),
                host_key_rotation=HostKeyRotation(),  # Debian's sshd and key path, as a cloud's
            )
            _write(cdir / "known_hosts", knownhosts.render(info.nodes), 0o644)
            state.save(info)  # recorded before waiting, so `down` can always find the PIDs
            self._wait_ssh(info, progress)
            return info
        except BaseException:
            # By folder too: a signal between starting QEMU and recording its PID.
            terminate(_cluster_qemus(cdir, pids.values()))
            state.forget(spec.name)
            raise

    def _wait_ssh(
        self, info: ClusterInfo, progress: Progress, names: list[str] | None = None
    ) -> None:
        cdir = state.cluster_dir(info.name)
        started = time.monotonic()
        waiting = {n.name: n for n in info.nodes if names is None or n.name in names}
        booted: dict[str, float] = {}
        while waiting:
            for name, node in list(waiting.items()):
                pid = info.provider["pids"][name]
                if not _alive(pid):
                    ndir = cdir / "nodes" / name
                    tail = "\n".join(
                        (ndir / f).read_text(errors="replace").strip()[-600:]
                        for f in ("qemu.log", "console.log")
                        if (ndir / f).exists()
                    )
                    raise GpufleetError(f"VM {name} exited while booting:\n{tail}")
                if _banner(node.ssh_port):
                    booted[name] = time.monotonic() - started
                    progress(f"{name}: SSH up {booted[name]:.0f}s after start")
                    del waiting[name]
            if waiting and time.monotonic() - started > BOOT_TIMEOUT_S:
                raise GpufleetError(
                    f"VMs not answering SSH after {BOOT_TIMEOUT_S:.0f}s: " + ", ".join(waiting),
                    hint=f"see the console logs under {cdir / 'nodes'}",
                )
            if waiting:
                time.sleep(1)
        seconds = dict(info.provider.get("boot_seconds", {}))
        info.provider["boot_seconds"] = seconds | {k: round(v, 1) for k, v in booted.items()}
        state.save(info)

    def down(self, info: ClusterInfo, progress: Progress) -> None:
        cdir = state.cluster_dir(info.name)
        running = _cluster_qemus(cdir, info.provider.get("pids", {}).values())
        terminate(running, grace_s=5.0)
        for ndir in (cdir / "nodes").glob("*"):
            for f in ("disk.qcow2", "seed.iso"):
                with contextlib.suppress(FileNotFoundError):
                    (ndir / f).unlink()
        progress(f"stopped {len(running)} VMs, removed {len(info.nodes)} overlays")

    def extend(self, info: ClusterInfo, expires_at: float) -> None:
        """As on a cloud: the new hard expiry goes where each node's own expiry timer reads it
        first (/var/lib/gpufleet/expires_at, over SSH); the seed keeps the creation-time one."""
        from gpufleet.provision.nodeexpiry import write_node_expiry

        write_node_expiry(info, expires_at)

    def replace(self, info: ClusterInfo, nodes: list[str], progress: Progress) -> ClusterInfo:
        """A new VM for each of `nodes`: its QEMU stopped (ours only) and its overlay and seed
        removed, then the same base image and cloud-init (same name, index, private address
        and MACs, a new host key and instance id) booted onto the survivors' segment."""
        cdir = state.cluster_dir(info.name)
        known = {n.name: i for i, n in enumerate(info.nodes)}
        unknown = [n for n in nodes if n not in known]
        if unknown:
            raise GpufleetError(
                f"cluster {info.name!r} has no node {', '.join(unknown)}",
                hint=f"its nodes: {', '.join(known)}",
            )
        info = info.model_copy(deep=True)
        pids: dict[str, int] = info.provider.setdefault("pids", {})
        image = BaseImage(Path(info.provider["image"]))
        if not image.disk.exists():
            raise GpufleetError(
                f"the base image {image.dir} of cluster {info.name!r} is gone",
                hint=f"`gpufleet down {info.name}`, then create the cluster again",
            )
        survivors = [pids[n.name] for n in info.nodes if n.name not in nodes and n.name in pids]
        boot = _Boot(
            tools=require_tools(),
            image=image,
            python_dir=python_share(progress),
            accel=info.provider.get("accel") or "tcg",
            cluster=info.name,
            cdir=cdir,
            node_count=len(info.nodes),
            ssh_user=info.ssh_user,
            user_public_key=(cdir / "id_ed25519.pub").read_text().strip(),
            expires_at=info.expires_at,
            boot_lease_s=info.provider.get("boot_lease_s"),
            segment_port=_segment_port(info, cdir, survivors),
        )
        for name in nodes:
            ndir = cdir / "nodes" / name
            old = [p for p in folder_processes(ndir) if "qemu-system" in _cmdline(p)]
            pid = pids.get(name, 0)
            if pid and _alive(pid) and f"{ndir}/" in _cmdline(pid):  # ours: not a reused PID
                old.append(pid)
            terminate(sorted(set(old)), grace_s=5.0)
            for f in ("disk.qcow2", "seed.iso"):
                with contextlib.suppress(FileNotFoundError):
                    (ndir / f).unlink()
            with contextlib.suppress(FileNotFoundError):  # the new boot's console starts empty
                (ndir / "console.log").replace(ndir / "console.log.old")
            progress(f"{name}: old VM {'stopped' if old else 'already gone'}, overlay removed")
        try:
            for name in nodes:
                index = known[name]
                pids[name], node = boot.start(
                    index, self.node_env.get(name, {}), port=info.nodes[index].ssh_port
                )
                info.nodes[index] = node
                progress(f"{name}: new VM booting (pid {pids[name]}, SSH on {node.ssh_port})")
        finally:  # what was started is recorded, so `down` finds it even when a boot failed
            knownhosts.write(info.known_hosts_path, knownhosts.render(info.nodes))
            state.save(info)
        self._wait_ssh(info, progress, nodes)
        return info

    def status(self, info: ClusterInfo) -> dict[str, str]:
        cdir = state.cluster_dir(info.name)
        pids = info.provider.get("pids", {})
        return {
            n.name: "running" if _ours(pids.get(n.name, 0), cdir) else "gone" for n in info.nodes
        }


def _cluster_qemus(cdir: Path, recorded) -> list[int]:
    """This cluster's QEMU processes: the recorded PIDs still running QEMU for its folder, and
    any QEMU whose command line names the folder (one started but not yet recorded)."""
    found = {p for p in folder_processes(cdir) if "qemu-system" in _cmdline(p)}
    return sorted({int(p) for p in recorded if _ours(int(p), cdir)} | found)


def _segment_port(info: ClusterInfo, cdir: Path, survivors: list[int]) -> int:
    """The UDP port of the cluster's private segment: recorded by `up`, or read from a
    surviving QEMU's command line (a cluster recorded before the port was); a new one where
    no node is left to share it with."""
    if info.provider.get("segment_port"):
        return int(info.provider["segment_port"])
    running = [pid for pid in survivors if _ours(pid, cdir)]
    for pid in running:
        found = re.search(r"mcast=230\.0\.77\.1:(\d+)", _cmdline(pid))
        if found:
            return int(found.group(1))
    if running:
        raise GpufleetError(
            f"cannot tell the private segment of cluster {info.name!r}: no surviving VM names it",
            hint=f"`gpufleet down {info.name}`, then create the cluster again",
        )
    return free_udp_port()


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
