"""A STAND-IN for components/containerpull.py (issue 21, interface 1) and a fake runtime.

Until the node pull script is on this branch, the pull tests run pullstandin.sh (same
arguments, stdin secrets, status.json and last line) through module(); the fake runtime
(fakeruntime.sh as `docker`/`podman`) records its calls and prints digests. Switching to
the real script: make module() return gpufleet.components.containerpull (BOOT_STATE_DIR
patched to a test folder).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).parent
MARK = "gpufleet-pull:"
DIGEST = "sha256:" + "ab" * 32


def command(
    ref, *, runtime: str, sudo: bool, state_dir: str, stall_s: int, attempts: int,
    script_path: str,
) -> str:  # fmt: skip
    what = (
        ["--archive", ref.path, "--transport", ref.transport]
        if ref.is_archive
        else ["--image", ref.reference]
    )
    return shlex.join(
        ["bash", script_path, *what, "--runtime", runtime, *(["--sudo"] if sudo else []),
         "--state", state_dir, "--stall", str(stall_s), "--attempts", str(attempts)]
    )  # fmt: skip


def module(boot_state_dir: Path) -> SimpleNamespace:
    """What pull.node_script() returns: the interface-1 names, the stand-in script."""
    return SimpleNamespace(
        SCRIPT=(HERE / "pullstandin.sh").read_text(),
        BOOT_STATE_DIR=str(boot_state_dir),
        MARK=MARK,
        command=command,
    )


def fake_runtime(folder: Path) -> Path:
    """A folder with `docker` and `podman` (fakeruntime.sh) and its default digest."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (HERE / "fakeruntime.sh").read_text()
    for name in ("docker", "podman"):
        p = folder / name
        p.write_text(text)
        p.chmod(0o755)
    (folder / "digest").write_text(DIGEST + "\n")
    (folder / "calls.log").touch()
    os.chmod(folder, 0o755)
    return folder
