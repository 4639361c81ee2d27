"""A small OCI image archive built offline for the VM tests: Debian minbase with python3."""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

SUITE = "bookworm"  # python3 3.11, as the VM guests' (the shared torch is built for it)
PACKAGES = ("python3", "libstdc++6", "libgomp1")
REF_NAME = "gpufleet-test:py311"
VERSION = "1"  # bump when the packing below changes: part of the cache key
# Not needed to run python3 in a container: what a slim image leaves out.
DROP = ("dev/", "proc/", "sys/", "run/", "tmp/", "usr/share/doc/", "usr/share/man/",
        "usr/share/info/", "usr/share/locale/", "var/cache/apt/", "var/lib/apt/lists/",
        "var/log/")  # fmt: skip


@dataclass(frozen=True)
class Archive:
    """A built archive and the image id (config digest) `podman load` must report for it."""

    path: Path
    image_id: str  # "sha256:<hex>"


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def layer_tar(rootfs: Path) -> bytes:
    """The rootfs as one uncompressed layer tar, paths sorted, owners numeric (root)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = sorted(p for p in rootfs.rglob("*"))
        for p in paths:
            rel = p.relative_to(rootfs).as_posix()
            if any((rel + "/").startswith(d) and rel + "/" != d for d in DROP):
                continue  # the folder itself stays (empty), its contents go
            info = tar.gettarinfo(str(p), arcname=rel)
            info.uname = info.gname = ""
            if info.isreg():
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def pack(layer: bytes, out: Path, ref_name: str = REF_NAME) -> str:
    """An OCI image layout (oci-layout, index.json, blobs/sha256/...) in one tar at `out`;
    returns the config digest (the image id a runtime reports)."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    layer_digest, gz = _blob(gzip.compress(layer, compresslevel=6, mtime=0))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["/bin/bash"],
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"gpufleet tests: debootstrap minbase {SUITE} + python3"}],
    }
    config_digest, config_bytes = _blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": layer_digest,
                "size": len(gz),
            }
        ],
    }
    manifest_digest, manifest_bytes = _blob(json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": len(manifest_bytes),
                "annotations": {"org.opencontainers.image.ref.name": ref_name},
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
        f"blobs/sha256/{config_digest[7:]}": config_bytes,
        f"blobs/sha256/{manifest_digest[7:]}": manifest_bytes,
        f"blobs/sha256/{layer_digest[7:]}": gz,
    }
    tmp = out.with_name(out.name + ".part")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.rename(out)
    return config_digest


def _unmount_under(path: Path) -> None:
    mounts = [ln.split()[1] for ln in Path("/proc/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(f"{path}/")), reverse=True):
        subprocess.call(["umount", "-l", m], stderr=subprocess.DEVNULL)


def rootfs(dest: Path, debs: Path, mirror: str) -> None:
    """debootstrap minbase + PACKAGES into `dest`, reusing the VM image's deb cache (needs root;
    debootstrap still reads the mirror's Release and Packages files)."""
    debs.mkdir(parents=True, exist_ok=True)
    argv = [
        *("debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES)),
        *(f"--cache-dir={debs.resolve()}", SUITE, str(dest), mirror),
    ]
    r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"debootstrap exited {r.returncode}:\n{r.stdout[-3000:]}{r.stderr}")


def key() -> str:
    doc = json.dumps({"suite": SUITE, "packages": PACKAGES, "version": VERSION, "drop": DROP})
    return hashlib.sha256(doc.encode()).hexdigest()[:12]


def ensure_archive(cache: Path, debs: Path, mirror: str) -> Archive:
    """The cached archive for these inputs (cache/oci-<key>.tar), built first if missing."""
    cache.mkdir(parents=True, exist_ok=True)
    final = cache / f"oci-python3-{SUITE}-{key()}.tar"
    id_file = final.with_suffix(".id")
    if final.exists() and id_file.exists():
        return Archive(final, id_file.read_text().strip())
    with open(cache / f".oci-{key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.exists() and id_file.exists():
            return Archive(final, id_file.read_text().strip())
        work = cache / f".oci-build-{key()}-{os.getpid()}"
        _unmount_under(work)
        shutil.rmtree(work, ignore_errors=True)
        try:
            rootfs(work, debs, mirror)
            _unmount_under(work)
            image_id = pack(layer_tar(work), final)
            id_file.write_text(image_id + "\n")
        finally:
            _unmount_under(work)
            shutil.rmtree(work, ignore_errors=True)
    return Archive(final, image_id)
