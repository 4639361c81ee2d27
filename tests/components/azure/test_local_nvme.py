"""Azure ND H100 v5: its local NVMe disks become one RAID0 scratch mount (45-local-ssd.sh)."""

from __future__ import annotations

from tests.images.test_steps import make_node

# learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ndh100v5-series (read
# 2026-11-25): Standard_ND96isr_H100_v5 has local NVMe temp storage of 8 disks. The local disks
# name their model "Microsoft NVMe Direct Disk" (sysfs device/model, space-padded; "... v2" on
# newer sizes), as lsblk shows on Azure VMs; the OS disk is a SCSI "Virtual Disk".
ND_H100_V5_LOCAL_NVME = 8
LOCAL_MODEL = "Microsoft NVMe Direct Disk              "
# mdadm(8) (read 2026-11-25): `mdadm --detail --scan` prints an "ARRAY <device> metadata=...
# name=... UUID=..." line per array, the format of mdadm.conf(5), whose ARRAY lines name the
# arrays assembly creates under that device name at boot; azhpc's setup_nvme.sh appends it to
# /etc/mdadm/mdadm.conf. mke2fs(8): "-E nodiscard" skips discarding every block at mkfs time.
ARRAY_LINE = (
    "ARRAY /dev/md/gpufleet-localssd metadata=1.2 name=node-0:gpufleet-localssd UUID=1:2:3:4"
)
MDADM_CONF = "etc/mdadm/mdadm.conf"


def _node(tmp_path, local: int, other_nvme: int = 0):
    node = make_node(tmp_path, "azure", "Standard_ND96isr_H100_v5")
    for i in range(local + other_nvme):
        model = LOCAL_MODEL if i < local else "MSFT NVMe Accelerator v1.0"
        node.put(f"sys/block/nvme{i}n1/device/model", model + "\n")
    (node.bin / "mdadm").write_text(  # no array to assemble yet
        f'#!/bin/sh\necho "mdadm $*" >> {node.calls}\ncase "$1" in --assemble) exit 1 ;;\n'
        f'  --detail) echo "{ARRAY_LINE}" ;;\nesac\n'
    )
    return node


def test_the_eight_local_nvme_disks_become_one_raid0_mounted_once(tmp_path):
    node = _node(tmp_path, ND_H100_V5_LOCAL_NVME, other_nvme=1)
    r = node.run("45-local-ssd.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    calls = node.recorded()
    assert "--level=0" in calls and f"--raid-devices={ND_H100_V5_LOCAL_NVME}" in calls
    assert "/dev/nvme7n1" in calls and "/dev/nvme8n1" not in calls  # not a managed disk
    assert "mkfs.ext4" in calls and "mount -o discard,defaults,nofail /dev/md/" in calls
    node.forget()
    node.knob("mounted")
    r = node.run("45-local-ssd.sh")
    assert "already satisfied" in r.stdout and node.recorded() == ""


def test_disks_the_image_already_striped_are_left_alone(tmp_path):
    node = _node(tmp_path, ND_H100_V5_LOCAL_NVME)
    node.put("sys/block/nvme0n1/holders/md127")
    r = node.run("45-local-ssd.sh")
    assert r.returncode == 0 and "already in use" in r.stdout and node.recorded() == ""


def test_a_size_without_local_nvme_skips(tmp_path):
    r = _node(tmp_path, 0, other_nvme=2).run("45-local-ssd.sh")
    assert r.returncode == 0 and "no local SSDs" in r.stdout


def test_the_array_is_named_in_mdadm_conf_and_made_without_a_discard_pass(tmp_path):
    """After a reboot the array must come back as /dev/md/gpufleet-localssd (the step looks
    for it there), which needs its ARRAY line in mdadm.conf; a second run adds no second line."""
    node = _node(tmp_path, ND_H100_V5_LOCAL_NVME)
    r = node.run("45-local-ssd.sh")
    assert r.returncode == 0, r.stdout + r.stderr
    conf = (node.root / MDADM_CONF).read_text()
    assert conf.splitlines() == [ARRAY_LINE]
    (mkfs,) = [c for c in node.recorded().splitlines() if c.startswith("mkfs.ext4")]
    assert "-E nodiscard" in mkfs
    node.forget()
    node.run("45-local-ssd.sh")
    assert (node.root / MDADM_CONF).read_text().splitlines() == [ARRAY_LINE]
