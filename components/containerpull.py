"""The node pull script (scripts/container_pull.sh): its text, and the line that runs it."""

from __future__ import annotations

import shlex

from gpufleet.components.containerimage import ImageRef
from gpufleet.components.resources import data_dir

SCRIPT: str = (data_dir("scripts") / "container_pull.sh").read_text()
# Where the boot pull (cloud-init's gpufleet-pull.service) keeps its status.json and lock; a
# later pull of the same image with this state folder waits for it, or returns its result.
BOOT_STATE_DIR = "/var/lib/gpufleet/pull"
BOOT_SCRIPT_PATH = "/opt/gpufleet/container_pull.sh"
MARK = "gpufleet-pull:"


def command(
    ref: ImageRef,
    *,
    runtime: str,
    sudo: bool,
    state_dir: str,
    stall_s: int,
    attempts: int,
    script_path: str,
) -> str:
    """The shell line that runs the script on a node. For an archive, `ref.path` is the
    archive's path ON THE NODE. Secrets go to the line's stdin (NAME=value lines), never here."""
    if runtime not in ("docker", "podman"):
        raise ValueError(f"runtime must be docker or podman, not {runtime!r}")
    if ref.is_archive:
        what = ["--archive", ref.path, "--transport", ref.transport]
    else:
        what = ["--image", ref.reference]
    argv = ["bash", script_path, *what, "--runtime", runtime]
    argv += ["--sudo"] if sudo else []
    argv += ["--state", state_dir, "--stall", str(int(stall_s)), "--attempts", str(int(attempts))]
    return shlex.join(argv)


BOOT_WAIT_S = 1800  # how long the boot pull waits for a runtime the recipe may still install


def boot_pull(ref: ImageRef, *, runtime: str, stall_s: int, attempts: int) -> str | None:
    """The boot pull's wrapper script (cloud-init's gpufleet-pull.service runs it as root), or
    None where no pull can start at boot: an archive is on the CLI's machine, and nvcr.io takes
    the user's NGC_API_KEY, which only the CLI has (it pulls later, the key on stdin)."""
    if ref.is_archive or ref.registry_kind == "ngc":
        return None
    order = "docker podman" if runtime == "auto" else runtime
    line = command(
        ref,
        runtime="docker",  # replaced by the runtime found below
        sudo=False,
        state_dir=BOOT_STATE_DIR,
        stall_s=stall_s,
        attempts=attempts,
        script_path=BOOT_SCRIPT_PATH,
    ).replace("--runtime docker", '--runtime "$rt"')
    return _BOOT.format(order=order, tries=BOOT_WAIT_S // 5, line=line, wait=BOOT_WAIT_S)


# The runtime may not answer yet: a stock image gets docker from the recipe's 30-container step
# (which also restarts it: the pull in flight then fails and is retried, --attempts).
_BOOT = """#!/bin/bash
# gpufleet boot pull: as soon as the node's container runtime answers, pull the cluster's image
# (in the background of boot: the recipe's driver install runs at the same time).
set -u
for _ in $(seq 1 {tries}); do
  for rt in {order}; do
    if command -v "$rt" >/dev/null && "$rt" info >/dev/null 2>&1; then
      exec {line} </dev/null
    fi
  done
  sleep 5
done
echo "gpufleet-pull: no container runtime ({order}) answered within {wait} s" >&2
exit 1
"""
