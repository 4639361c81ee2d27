"""`--cloud vm` without booting anything: the QEMU command line, the seed, the image cache key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.components.bootstrap import BootstrapContext, render_cloud_init
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from gpufleet.core.errors import MissingTool
from gpufleet.provision import for_cloud, vm, vmimage


def argv(tmp_path: Path, accel: str = "tcg", python_dir: Path | None = None) -> list[str]:
    return vm.qemu_argv(
        qemu="qemu-system-x86_64",
        accel=accel,
        image=vmimage.BaseImage(tmp_path / "img"),
        node="c-node-1",
        index=1,
        node_dir=tmp_path / "n1",
        ssh_port=2222,
        segment_port=40000,
        python_dir=python_dir,
    )


def test_guests_reach_nothing_outside_and_ssh_is_on_loopback_only(tmp_path):
    args = " ".join(argv(tmp_path))
    assert "user,id=pub,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22" in args
    # The private segment is multicast on loopback: it never leaves this machine either.
    assert "socket,id=priv,mcast=230.0.77.1:40000,localaddr=127.0.0.1" in args
    assert "-nodefaults" in args  # no default NIC that would bypass restrict=on


@pytest.mark.parametrize("accel", ["kvm", "tcg"])
def test_every_accel_keeps_the_guest_network_on_loopback(tmp_path, accel):
    """Whichever accelerator, every NIC is isolated. QEMU's user networking with
    restrict=on routes no guest packet outside; a hostfwd without a host address listens
    on every interface, so each names 127.0.0.1; a socket netdev sends from `localaddr`
    (https://www.qemu.org/docs/master/system/invocation.html, -netdev user / socket).
    `-cpu host` is refused without KVM (QEMU: "CPU model 'host' requires KVM or HVF")."""
    args = argv(tmp_path, accel)
    netdevs = [args[i + 1] for i, a in enumerate(args) if a == "-netdev"]
    assert len(netdevs) == 2 and "-nodefaults" in args  # no NIC but these two
    assert not {"-net", "-nic"} & set(args)
    for nd in netdevs:
        opts = nd.split(",")
        if opts[0] == "user":
            assert "restrict=on" in opts
            fwds = [o for o in opts if o.startswith("hostfwd=")]
            assert fwds and all(o.startswith("hostfwd=tcp:127.0.0.1:") for o in fwds)
        else:
            assert opts[0] == "socket" and "localaddr=127.0.0.1" in opts
    cpu = args[args.index("-cpu") + 1]
    assert args[args.index("-accel") + 1] == accel and (cpu == "host") == (accel == "kvm")


def test_python_share_is_read_only(tmp_path):
    args = argv(tmp_path, python_dir=tmp_path / "py")
    share = args[args.index("-virtfs") + 1]
    assert share.endswith("readonly=on") and f"path={tmp_path / 'py'}" in share
    assert "-virtfs" not in argv(tmp_path)


def test_network_config_matches_the_nics_on_the_command_line(tmp_path):
    doc = json.loads(vm.network_config(1))
    args = " ".join(argv(tmp_path))
    eth0, eth1 = doc["config"]
    assert f"mac={eth0['mac_address']}" in args.split("netdev=pub,")[1].split()[0]
    assert f"mac={eth1['mac_address']}" in args.split("netdev=priv,")[1].split()[0]
    assert eth1["subnets"] == [{"type": "static", "address": "10.77.0.11/24"}]
    assert "dns_nameservers" not in json.dumps(doc)  # downloads fail at once: no resolver


def test_vm_node_cloud_init_is_the_cloud_render(golden):
    """The seed's user-data is render_cloud_init's output: the same template and steps."""
    ctx = BootstrapContext(
        cluster="c",
        cloud="vm",
        instance_type="vm",
        node_index=0,
        node_count=2,
        ssh_user="gpufleet",
        user_public_key="ssh-ed25519 AAAAuser c",
        host_private_key="-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END ...-----",
        host_public_key="ssh-ed25519 AAAAhost c-node-0",
        expires_at=1_900_000_000,
    )
    text = render_cloud_init(ctx)
    assert "GPUFLEET_GPUS=0" in text and "GPUFLEET_EXPIRES_AT=1900000000" in text
    golden("vm/node-0.cloud-init.yaml", text)


def test_image_key_follows_the_package_list():
    assert vmimage.image_key() == vmimage.image_key(tuple(reversed(vmimage.PACKAGES)))
    assert vmimage.image_key() != vmimage.image_key((*vmimage.PACKAGES, "htop"))


def test_missing_tools_name_the_debian_packages(monkeypatch):
    monkeypatch.setattr(vmimage.shutil, "which", lambda *a, **k: None)
    with pytest.raises(MissingTool) as e:
        vmimage.require_tools()
    assert e.value.hint == (
        "sudo apt-get install debootstrap e2fsprogs genisoimage qemu-system-x86 qemu-utils"
    )


def test_image_cache_defaults_under_gpufleet_home(gpufleet_home, monkeypatch):
    monkeypatch.delenv("GPUFLEET_IMAGE_CACHE", raising=False)
    assert vmimage.cache_root() == gpufleet_home / "images"


def test_guest_gets_torch_and_its_runtime_dependencies():
    pytest.importorskip("torch")
    names = {d.metadata["Name"].lower() for d in vmimage.guest_distributions()}
    assert {"torch", "numpy", "filelock", "sympy"} <= names
    assert "pytest" not in names and "pulumi" not in names


def test_spec_accepts_vm_without_gpus():
    spec = ClusterSpec.from_input({"name": "v", "cloud": "vm", "nodes": 2, "ttl_minutes": 2})
    assert spec.effective_ssh_user == "gpufleet" and spec.gpus == 0
    assert type(for_cloud("vm")).__name__ == "VmProvisioner"
    with pytest.raises(SpecError, match="no GPUs"):
        ClusterSpec.from_input({"name": "v", "cloud": "vm", "gpus_per_node": 1})


def test_down_stops_a_qemu_it_never_recorded_and_nothing_else(gpufleet_home, tmp_path):
    """A signal between starting a node's QEMU and recording its PID must not leave the VM
    running: `down` (and a failed `up`) also find QEMU by the folder its command line names.
    Other processes naming the folder (a user's `ssh -F .../ssh_config`) are not QEMU: kept."""
    import subprocess
    import sys

    from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
    from gpufleet.core import state

    cdir = state.cluster_dir("c")
    (cdir / "nodes/node-0").mkdir(parents=True)
    fake = tmp_path / "bin/qemu-system-x86_64"  # any program by that name will do
    fake.parent.mkdir()
    fake.symlink_to(sys.executable)
    sleep = "import time; time.sleep(60)"
    qemu = subprocess.Popen([str(fake), "-c", sleep, f"{cdir}/nodes/node-0/disk.qcow2"])
    other = subprocess.Popen([sys.executable, "-c", sleep, f"{cdir}/ssh_config"])
    try:
        info = ClusterInfo(
            name="c",
            cloud="vm",
            instance_type="vm",
            nodes=[NodeInfo(name="node-0", private_ip="10.77.0.10", public_ip="127.0.0.1")],
            ssh_user="u",
            ssh_key_path="k",
            known_hosts_path="kh",
            provider={"pids": {}},
        )
        vm.VmProvisioner().down(info, lambda m: None)
        assert qemu.wait(timeout=10) is not None
        assert other.poll() is None
    finally:
        for p in (qemu, other):
            p.kill()
            p.wait()


def test_replace_stops_only_the_lost_nodes_qemu_and_records_the_new_vm(
    gpufleet_home, tmp_path, monkeypatch
):
    """replace(['node-1']): node-1's QEMU (found by its recorded PID, and by its folder) is
    stopped and its overlay and seed removed; node-0's QEMU, files and record are untouched;
    the new VM boots onto the recorded segment with node-1's index and SSH port, and its PID,
    host key and instance id are saved (known_hosts too) before the SSH wait.

    Faked: QEMU (a Python process by that name), the image, and the boot itself (_Boot.start
    records what it was asked); the real boot is tests/integration/test_vm_recover.py."""
    import subprocess
    import sys

    from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
    from gpufleet.core import state
    from gpufleet.remote import knownhosts

    cdir = state.cluster_dir("c")
    (cdir / "id_ed25519.pub").parent.mkdir(parents=True, exist_ok=True)
    (cdir / "id_ed25519.pub").write_text("ssh-ed25519 AAAAuser c\n")
    image = tmp_path / "img"
    image.mkdir()
    (image / "root.raw").write_text("")
    fake = tmp_path / "bin/qemu-system-x86_64"
    fake.parent.mkdir()
    fake.symlink_to(sys.executable)
    sleep = "import time; time.sleep(60)"
    procs = {}
    for n in ("node-0", "node-1", "node-10"):
        (cdir / "nodes" / n).mkdir(parents=True)
        for f in ("disk.qcow2", "seed.iso", "console.log"):
            (cdir / "nodes" / n / f).write_text("x")
        procs[n] = subprocess.Popen([str(fake), "-c", sleep, f"{cdir}/nodes/{n}/disk.qcow2"])
    nodes = [
        NodeInfo(name=f"node-{i}", private_ip=vm.private_ip(i), public_ip="127.0.0.1",
                 ssh_port=40100 + i, private_ssh_port=22, host_key=f"ssh-ed25519 AAAAold{i}")
        for i in range(11)
    ]  # fmt: skip
    info = ClusterInfo(
        name="c",
        cloud="vm",
        instance_type="vm",
        nodes=nodes,
        ssh_user="u",
        ssh_key_path=str(cdir / "id_ed25519"),
        known_hosts_path=str(cdir / "known_hosts"),
        provider={
            "pids": {n: p.pid for n, p in procs.items()},
            "accel": "tcg",
            "image": str(image),
            "segment_port": 40555,
            "boot_lease_s": 2700,
        },
    )
    state.save(info)
    asked = []

    def start(self, index, extra, port=0):
        asked.append((index, port, self.segment_port, self.boot_lease_s, self.node_count))
        new = NodeInfo(name=f"node-{index}", private_ip=vm.private_ip(index),
                       public_ip="127.0.0.1", ssh_port=port, private_ssh_port=22,
                       host_key="ssh-ed25519 AAAAnew", instance_id="c-node-1-new",
                       bootstrap_host_key=True)  # fmt: skip
        return 4242424, new

    waited = []
    monkeypatch.setattr(vm._Boot, "start", start)
    monkeypatch.setattr(vm, "require_tools", lambda: {})
    monkeypatch.setattr(vm, "python_share", lambda progress: None)
    monkeypatch.setattr(
        vm.VmProvisioner,
        "_wait_ssh",
        lambda self, i, p, names: waited.append((state.load("c"), names)),
    )
    try:
        got = vm.VmProvisioner().replace(info, ["node-1"], lambda m: None)
        assert procs["node-1"].wait(timeout=10) is not None
        assert procs["node-0"].poll() is None and procs["node-10"].poll() is None
    finally:
        for p in procs.values():
            p.kill()
            p.wait()
    assert asked == [(1, 40101, 40555, 2700, 11)]
    for f in ("disk.qcow2", "seed.iso"):
        assert not (cdir / "nodes/node-1" / f).exists()
        assert (cdir / "nodes/node-0" / f).exists() and (cdir / "nodes/node-10" / f).exists()
    assert (cdir / "nodes/node-1/console.log.old").exists()
    assert got.provider["pids"]["node-1"] == 4242424
    assert got.provider["pids"]["node-0"] == procs["node-0"].pid
    assert got.nodes[1].host_key == "ssh-ed25519 AAAAnew" and got.nodes[0] == nodes[0]
    assert info.nodes[1].host_key == "ssh-ed25519 AAAAold1"  # the caller's record is not changed
    saved, names = waited[0]  # saved before the SSH wait: `down` finds the new PID
    assert names == ["node-1"] and saved.provider["pids"]["node-1"] == 4242424
    pinned = knownhosts.load(cdir / "known_hosts")
    assert pinned["[127.0.0.1]:40101"] == {"ssh-ed25519": {"AAAAnew"}}
    assert pinned["[127.0.0.1]:40100"] == {"ssh-ed25519": {"AAAAold0"}}


def test_replace_refuses_a_node_the_cluster_does_not_have(gpufleet_home):
    from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
    from gpufleet.core.errors import GpufleetError

    info = ClusterInfo(
        name="c",
        cloud="vm",
        nodes=[NodeInfo(name="node-0", private_ip="10.77.0.10", public_ip="127.0.0.1")],
        ssh_user="u",
        ssh_key_path="k",
        known_hosts_path="kh",
        provider={"pids": {}, "image": "/nonexistent"},
    )
    with pytest.raises(GpufleetError, match="no node node-3"):
        vm.VmProvisioner().replace(info, ["node-3"], lambda m: None)
