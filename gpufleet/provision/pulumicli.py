"""The Pulumi CLI for researchers: a pinned version installed under $GPUFLEET_HOME, no root."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from gpufleet.core import state
from gpufleet.core.errors import GpufleetError

# The CLI version gpufleet's Automation API code is tested with (the pulumi SDK pinned in
# the dev environment); `gpufleet setup pulumi` installs exactly this one.
PINNED = "3.272.0"
Installer = Callable[[Path, str], None]


def install_root(version: str = PINNED) -> Path:
    return state.home() / "pulumi-cli" / version


def binary(version: str = PINNED) -> Path:
    return install_root(version) / "bin" / "pulumi"


def installed(version: str = PINNED) -> str | None:
    """The installed pinned CLI, or None."""
    path = binary(version)
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def automation_install(root: Path, version: str) -> None:
    """Pulumi's own installer (PulumiCommand.install: get.pulumi.com) into `root`."""
    from pulumi.automation import PulumiCommand
    from semver import VersionInfo

    PulumiCommand.install(root=str(root), version=VersionInfo.parse(version))


def install(
    progress: Callable[[str], None], installer: Installer | None = None, version: str = PINNED
) -> str:
    """Install the pinned CLI unless it is there; its path. Checks the version it reports."""
    found = installed(version)
    if found:
        progress(f"Pulumi CLI {version} already installed: {found}")
        return found
    root = install_root(version)
    root.mkdir(parents=True, exist_ok=True)
    progress(f"installing Pulumi CLI {version} into {root}")
    try:
        (installer or automation_install)(root, version)
    except Exception as e:
        raise GpufleetError(
            f"installing Pulumi CLI {version} failed: {e}",
            hint="check the network, or install it by hand: curl -fsSL https://get.pulumi.com | sh",
        ) from e
    path = installed(version)
    if path is None:
        raise GpufleetError(f"the installer left no pulumi binary at {binary(version)}")
    out = subprocess.run([path, "version"], capture_output=True, text=True, timeout=60)
    reported = out.stdout.strip().lstrip("v")
    if out.returncode != 0 or reported != version:
        raise GpufleetError(
            f"{path} reports version {reported or '(none)'}, expected {version}",
            hint=f"remove {root} and run `gpufleet setup pulumi` again",
        )
    progress(f"Pulumi CLI {version} ready: {path}")
    return path
