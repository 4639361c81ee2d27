"""gpufleet's CrossGuard pack, ready to run: a copy under $GPUFLEET_HOME with its own virtualenv."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError
from gpufleet.provision import Progress

PACK_NAME = "gpufleet"
FAMILIES_FILE = "gpu_families.json"
READY = ".gpufleet-ready"  # written last: a folder without it is rebuilt
VENV = "venv"  # PulumiPolicy.yaml runtime.options.virtualenv
FLAG = "--no-policy"
ENV = "GPUFLEET_POLICY_PACK"  # a pack folder prepared by hand (offline): used as it is

# AWS GPU instance families gpufleet's catalog does not sell, so the pack still knows them as GPU
# types. Sources (read 2026-11-25): the EC2 User Guide's "accelerated computing instances" page,
# GPU instances section (docs.aws.amazon.com/AWSEC2/latest/WindowsGuide/
# accelerated-computing-instances.html: G5, G4ad (AMD Radeon Pro V520), G4dn, G3, P2, P3, P4d);
# AWS Batch "GPU jobs" (docs.aws.amazon.com/batch/latest/userguide/gpu-jobs.html: g3s, g5g);
# RAPIDS on AWS (docs.rapids.ai deployment, aws/index: gr6.8xlarge, 1 x L4); p5e.48xlarge
# (8 x H200) in /work/shared/reference/cloud-gpu-facts.md.
AWS_FAMILIES_OUTSIDE_CATALOG = ("p2", "p3", "p5e", "g3", "g3s", "g4ad", "g5g", "gr6")


def family(cloud: str, machine_type: str) -> str | None:
    """A machine type's family as the pack names it: AWS p4d (before the dot), GCP a3 (the
    series), Azure NC (the letters after Standard_)."""
    import re

    if cloud == "aws":
        return machine_type.split(".", 1)[0].lower()
    if cloud == "gcp":
        return machine_type.rsplit("/", 1)[-1].split("-", 1)[0].lower()
    m = re.match(r"(?i)standard_([a-z]+)\d", machine_type)
    return m.group(1).upper() if m else None


def gpu_families_doc(types: Iterable[Any], extra_aws: Iterable[str] = ()) -> dict[str, Any]:
    """policy/gpu_families.json: each cloud's GPU families, from catalog entries (cloud,
    name, cloud_machine_type) plus `extra_aws`. A GCP N1 shape carries its GPUs as guest
    accelerators (its machine type is a CPU type): the pack checks those separately."""
    out: dict[str, set[str]] = {"aws": set(extra_aws), "gcp": set(), "azure": set()}
    for it in types:
        if it.cloud == "gcp" and it.cloud_machine_type != it.name:
            continue
        f = family(it.cloud, it.cloud_machine_type)
        if f:
            out[it.cloud].add(f)
    return {
        "_generated": "gpufleet.provision.policypack.gpu_families_doc (never edit by hand; "
        "GPUFLEET_UPDATE_GOLDEN=1 pytest tests/gpufleet/provision/test_policypack.py)",
        **{cloud: sorted(fams) for cloud, fams in out.items()},
    }


def shipped_dir() -> Path:
    """The pack as this installation ships it (policy/; a wheel's copy)."""
    from gpufleet.components.resources import data_dir

    return data_dir("policy")


def _pack_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and VENV not in p.relative_to(root).parts
        and "__pycache__" not in p.parts
        and p.name != READY
    )


def pack_key(root: Path | None = None) -> str:
    """gpufleet's version and a digest of the shipped pack: a changed pack is prepared anew."""
    import gpufleet

    root = root or shipped_dir()
    h = hashlib.sha256()
    for p in _pack_files(root):
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return f"{gpufleet.__version__}-{h.hexdigest()[:12]}"


def prepared_dir(key: str | None = None) -> Path:
    return state.home() / "policy-pack" / (key or pack_key())


def venv_python(pack: Path) -> Path:
    return pack / VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


class PolicyPackUnavailable(GpufleetError):
    """The pack's virtualenv could not be made (no network, no pip): `up` refuses before
    anything exists rather than create a cluster the guard rails never saw."""

    exit_code = ExitCode.USAGE

    def __init__(self, where: Path, detail: str):
        super().__init__(
            f"gpufleet's policy pack could not be prepared in {where}: {detail}; nothing was "
            "created",
            hint=f"run again with network access (pip installs pulumi-policy there once per "
            f"gpufleet version); offline, point pip at a folder of wheels (`pip download -r "
            f"{shipped_dir() / 'requirements.txt'}` elsewhere): PIP_NO_INDEX=1 "
            f"PIP_FIND_LINKS=/path/to/wheels gpufleet up ..., or copy the pack, make its venv/ "
            f"yourself and set {ENV} to that folder; or pass {FLAG} to create the cluster "
            "without the pack",
        )
        self.where = where


Runner = Callable[..., Any]  # subprocess.run's signature


def prepare(progress: Progress, *, run: Runner = subprocess.run, python: str | None = None) -> Path:
    """The pack's folder for `pulumi up --policy-pack`: the shipped pack copied under
    $GPUFLEET_HOME/policy-pack/<version>-<digest>, with venv/ holding its requirements
    (`python -m venv`, then that venv's pip). Made once, reused while READY is there;
    PolicyPackUnavailable when it cannot be made. $GPUFLEET_POLICY_PACK names a folder
    prepared by hand instead (it must hold PulumiPolicy.yaml)."""
    import fcntl

    given = os.environ.get(ENV)
    if given:
        if not (Path(given) / "PulumiPolicy.yaml").is_file():
            raise PolicyPackUnavailable(
                Path(given), f"${ENV} names no folder with PulumiPolicy.yaml"
            )
        return Path(given)
    target = prepared_dir()
    if (target / READY).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second `up` waits, then finds it ready
        if (target / READY).is_file():
            return target
        progress(
            f"preparing gpufleet's policy pack in {target} (once per gpufleet version: "
            "a virtualenv with pulumi-policy)"
        )
        shutil.rmtree(target, ignore_errors=True)
        source = shipped_dir()
        for p in _pack_files(source):
            dest = target / p.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest)
        steps = [
            [python or sys.executable, "-m", "venv", str(target / VENV)],
            [str(venv_python(target)), "-m", "pip", "install", "--disable-pip-version-check",
             "--quiet", "-r", str(target / "requirements.txt")],
        ]  # fmt: skip
        for cmd in steps:
            what = f"`python {' '.join(cmd[1:4])}`"
            try:
                done = run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.SubprocessError) as e:
                shutil.rmtree(target, ignore_errors=True)
                raise PolicyPackUnavailable(target, f"{what}: {e}") from e
            if done.returncode != 0:
                shutil.rmtree(target, ignore_errors=True)
                said = (done.stderr or done.stdout or "").strip().splitlines()
                raise PolicyPackUnavailable(
                    target,
                    f"{what} exited {done.returncode}" + (f" ({said[-1]})" if said else ""),
                )
        (target / READY).write_text(pack_key() + "\n")
    return target
