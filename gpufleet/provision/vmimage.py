"""The `--cloud vm` base image: a Debian rootfs (debootstrap) on a raw ext4 disk, cached."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError, MissingTool
from gpufleet.provision import Progress

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# What a cloud's stock image has, plus what the recipe's base step checks for (00-base.sh), so
# that step is satisfied offline. python3-cffi-backend: debootstrap does not resolve it.
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "udev",
    "kmod",
    "cloud-init",
    "openssh-server",
    "linux-image-amd64",
    "isc-dhcp-client",
    "ifupdown",
    "iproute2",
    "sudo",
    "python3",
    "python3-cffi-backend",
    "ca-certificates",
    "curl",
    "gnupg",
    "jq",
    "pciutils",
    # On every cloud's stock image and used by gpufleet on the nodes (workdir sync, cancel).
    "rsync",
    "openssh-client",
    "procps",
    # cloud-init's locale module sets en_US.UTF-8: generated here, not at every first boot.
    "locales",
    # Rank containers (issue 21), run as root. debootstrap installs no Recommends and does not
    # resolve alternatives or virtual packages, so each is named: crun (podman's `crun | runc`),
    # the CNI plugins (containers-common's `container-network-stack`), catatonit (`--init`).
    # Native overlayfs on ext4: no fuse-overlayfs; root only: no uidmap.
    "podman",
    "crun",
    "conmon",
    "catatonit",
    "containernetworking-plugins",
    "golang-github-containers-common",
    "golang-github-containers-image",
)
# Bump when the rootfs customisation below changes: it is part of the cache key.
RECIPE_VERSION = "4"
# The guest's path of the host's Python packages (torch), shared read-only over virtio-9p.
GUEST_PYTHON_DIR = "/opt/gpufleet/python"
PYTHON_SHARE_TAG = "gfpython"
# Python distributions the guest gets from the host (with their dependencies), for DDP jobs.
GUEST_DISTRIBUTIONS: tuple[str, ...] = ("torch", "numpy")

# Program -> the Debian package that brings it.
TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "debootstrap": "debootstrap",
    "genisoimage": "genisoimage",
    "mkfs.ext4": "e2fsprogs",
}


def require_tools(names: tuple[str, ...] = tuple(TOOLS)) -> dict[str, str]:
    """Absolute paths of the programs; one error naming every missing Debian package."""
    found = {n: shutil.which(n) or shutil.which(n, path="/usr/sbin:/sbin") for n in names}
    missing = [n for n, p in found.items() if not p]
    if missing:
        debs = " ".join(sorted({TOOLS[n] for n in missing}))
        raise MissingTool(", ".join(missing), f"sudo apt-get install {debs}")
    return {n: p for n, p in found.items() if p}


def cache_root() -> Path:
    """$GPUFLEET_IMAGE_CACHE, else $GPUFLEET_HOME/images."""
    env = os.environ.get("GPUFLEET_IMAGE_CACHE")
    return Path(env) if env else state.home() / "images"


def image_key(packages: tuple[str, ...] = PACKAGES, suite: str = SUITE) -> str:
    """The cache key: the package list, the suite and the recipe version."""
    doc = json.dumps({"suite": suite, "packages": sorted(packages), "recipe": RECIPE_VERSION})
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class BaseImage:
    """A built image: the root disk and the kernel/initrd booted directly from it."""

    dir: Path

    @property
    def disk(self) -> Path:
        return self.dir / "root.raw"

    @property
    def kernel(self) -> Path:
        return self.dir / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.dir / "initrd.img"


def fstab() -> str:
    """The guest's fstab: the root disk and the host's Python share (absent: boot goes on)."""
    return (
        "/dev/vda / ext4 defaults,errors=remount-ro 0 1\n"
        f"{PYTHON_SHARE_TAG} {GUEST_PYTHON_DIR} 9p "
        "trans=virtio,version=9p2000.L,ro,cache=loose,msize=262144,nofail 0 0\n"
    )


# podman's default cgroup manager (systemd) talks to systemd over D-Bus, which a minbase rootfs
# lacks ("crun: cannot open sd-bus"); cgroupfs needs none. Events to a file, not the journal.
CONTAINERS_CONF = """\
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

CLOUD_CFG = """\
# gpufleet --cloud vm: the seed ISO (label cidata) is the only datasource.
datasource_list: [NoCloud, None]
"""


def customise(root: Path) -> None:
    """What the rootfs needs beyond debootstrap to boot as a VM node."""
    (root / "etc/fstab").write_text(fstab())
    (root / "etc/cloud/cloud.cfg.d/90-gpufleet.cfg").write_text(CLOUD_CFG)
    (root / "etc/containers/containers.conf").write_text(CONTAINERS_CONF)
    interfaces = root / "etc/network/interfaces"
    interfaces.parent.mkdir(parents=True, exist_ok=True)
    interfaces.write_text("auto lo\niface lo inet loopback\nsource /etc/network/interfaces.d/*\n")
    (root / GUEST_PYTHON_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
    # SSH sessions (pam_env) see the shared packages, as on an image with torch installed.
    with open(root / "etc/environment", "a") as f:
        f.write(f"PYTHONPATH={GUEST_PYTHON_DIR}\n")
    (root / "etc/locale.gen").write_text("en_US.UTF-8 UTF-8\n")
    (root / "etc/default/locale").write_text("LANG=en_US.UTF-8\n")
    # Each VM is a new machine: systemd makes a machine-id at first boot.
    (root / "etc/machine-id").write_text("")
    with contextlib.suppress(FileNotFoundError):
        (root / "var/lib/dbus/machine-id").unlink()
    for p in (root / "var/cache/apt/archives").glob("*.deb"):
        p.unlink()
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
        raise GpufleetError(
            f"image build: `{cmd[0]}` exited with {rc}:\n" + "\n".join(tail),
            hint=f"full log: {log}",
        )


def _unmount_under(path: Path) -> None:
    """Unmount what debootstrap left mounted in the rootfs (proc, sys) if it was interrupted."""
    mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(f"{path}/")), reverse=True):
        subprocess.call(["umount", "-l", m], stderr=subprocess.DEVNULL)


def _remove_build(work: Path) -> None:
    _unmount_under(work)
    shutil.rmtree(work, ignore_errors=True)


def _du_bytes(root: Path) -> int:
    out = subprocess.run(["du", "-sxb", str(root)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def build(dest: Path, tools: dict[str, str]) -> None:
    """debootstrap -> customise -> raw ext4 disk + kernel + initrd, into `dest` (a new folder)."""
    if os.geteuid() != 0:
        raise GpufleetError(
            "building the VM base image needs root (debootstrap, file ownership in the image)",
            hint="run the first `--cloud vm` command once as root; the image is then cached",
            exit_code=ExitCode.USAGE,  # a setup the user must change
        )
    log = dest / "build.log"
    root = dest / "rootfs"
    mirror = os.environ.get("GPUFLEET_DEBIAN_MIRROR", MIRROR)
    (cache_root().resolve() / "debs").mkdir(parents=True, exist_ok=True)
    _run(
        [
            tools["debootstrap"],
            "--variant=minbase",
            "--include=" + ",".join(PACKAGES),
            f"--cache-dir={cache_root().resolve() / 'debs'}",  # later builds download nothing
            SUITE,
            str(root),
            mirror,
        ],
        log,
    )
    customise(root)
    _run(["chroot", str(root), "locale-gen"], log)
    boot = root / "boot"
    kernels = sorted(boot.glob("vmlinuz-*"))
    version = kernels[-1].name.removeprefix("vmlinuz-") if kernels else ""
    initrd = boot / f"initrd.img-{version}"  # not the .dpkg-bak/.new update-initramfs leaves
    if not kernels or not initrd.exists():
        raise GpufleetError("image build: no kernel/initrd in the rootfs", hint=f"see {log}")
    shutil.copy2(kernels[-1], dest / "vmlinuz")
    shutil.copy2(initrd, dest / "initrd.img")
    # Room for the recipe's files and job work directories, on top of the rootfs.
    size = _du_bytes(root) + 1536 * 1024 * 1024
    disk = dest / "root.raw"
    with open(disk, "wb") as f:
        f.truncate(size)
    _run([tools["mkfs.ext4"], "-q", "-F", "-L", "gpufleet-root", "-d", str(root), str(disk)], log)
    _remove_build(root)


def ensure_image(progress: Progress) -> BaseImage:
    """The cached base image for PACKAGES, built first if missing (one builder at a time)."""
    tools = require_tools()
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    key = image_key()
    final = cache / f"debian-{SUITE}-{key}"
    image = BaseImage(final)
    if (final / "manifest.json").exists():
        return image
    with open(cache / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building the same image
        if (final / "manifest.json").exists():
            return image
        progress(f"building the VM base image (Debian {SUITE}, once; cached in {cache})")
        started = time.monotonic()
        work = cache / f".build-{key}-{os.getpid()}"
        _remove_build(work)
        work.mkdir()
        try:
            build(work, tools)
            seconds = round(time.monotonic() - started, 1)
            manifest = {
                "suite": SUITE,
                "packages": list(PACKAGES),
                "key": key,
                "build_seconds": seconds,
                "disk_bytes": (work / "root.raw").stat().st_size,
            }
            (work / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            work.rename(final)
        except BaseException:
            _remove_build(work)
            raise
        progress(f"VM base image built in {seconds:.0f}s: {final}")
    return image


def guest_distributions(names: tuple[str, ...] = GUEST_DISTRIBUTIONS) -> list:
    """The installed distributions `names` need at run time, following extras (torch's CUDA
    libraries come through `cuda-toolkit[cudart,...]`: its import loads them)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    seen: dict[str, md.Distribution] = {}
    done: set[tuple[str, str]] = set()
    todo: list[tuple[str, str]] = [(n, "") for n in names]
    while todo:
        name, extra = todo.pop()
        key = name.lower().replace("_", "-")
        if (key, extra) in done:
            continue
        done.add((key, extra))
        try:
            dist = seen.get(key) or md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen[key] = dist
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": extra}):
                todo += [(req.name, "")] + [(req.name, e) for e in req.extras]
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def python_share(progress: Progress) -> Path | None:
    """A folder of the host's torch (and what it needs) for the guests, or None without torch.

    Hard links into the cache (a copy across file systems): the share is stable even if the
    host environment changes later. The guest's Python is 3.11 like ours (Debian bookworm).
    """
    dists = guest_distributions()
    if not any(d.metadata["Name"].lower() == "torch" for d in dists):
        return None
    ident = ",".join(f"{d.metadata['Name']}=={d.version}" for d in dists)
    tag = f"{sys.version_info[0]}{sys.version_info[1]}"
    key = hashlib.sha256(f"{tag}:{ident}".encode()).hexdigest()[:12]
    cache = cache_root()
    final = cache / f"python{tag}-{key}"
    if (final / ".complete").exists():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".python-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".complete").exists():
            return final
        progress(f"sharing {len(dists)} Python distributions with the VMs (torch): {final}")
        work = cache / f".python-{key}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        try:
            for dist in dists:
                for rel in dist.files or []:
                    src = Path(dist.locate_file(rel))
                    if ".." in rel.parts or not src.is_file():
                        continue  # console scripts outside site-packages: not needed
                    dst = work / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        os.link(src, dst)
                    except OSError:
                        shutil.copy2(src, dst)
            (work / ".complete").write_text(ident + "\n")
            shutil.rmtree(final, ignore_errors=True)
            work.rename(final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return final
