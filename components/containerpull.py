"""The node pull script (scripts/container_pull.sh): its text, and the line that runs it."""

from __future__ import annotations

import re
import shlex

from gpufleet.components.containerimage import ImageRef
from gpufleet.components.resources import data_dir

SCRIPT: str = (data_dir("scripts") / "container_pull.sh").read_text()
BOOT_SCRIPT: str = (data_dir("scripts") / "container_pull_boot.sh").read_text()
# Where the boot pull (cloud-init's gpufleet-pull.service, as root) keeps its status.json and
# lock. Only a pull given this state folder shares them; the CLI's pulls have their own and
# attach to this one by reading its status (gpufleet/jobs/pull.py).
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


_TAGGED = re.compile(r"^#@(\w+)\n(.*?)^#@end\n", re.M | re.S)


def boot_script(ref: ImageRef) -> str:
    """The boot pull's script for `ref` (a registry image): scripts/container_pull_boot.sh with
    container_pull.sh's registry logins for `ref`'s registry only, so the user data stays well
    under EC2's 16 KB."""
    logins = SCRIPT[SCRIPT.index("#@login-begin") : SCRIPT.index("#@login-end")]
    keep = ref.registry_kind
    logins = _TAGGED.sub(lambda m: m.group(2) if m.group(1) == keep else "", logins)
    logins = re.sub(r"^#@boot-skip .*?^#@boot-skip-end\n", "", logins, flags=re.M | re.S)
    if logins.count("json_field") == 1:  # defined, never used
        logins = re.sub(r"^json_field\(\) \{.*?^\}\n", "", logins, flags=re.M | re.S)
    call = f"login_{keep}" if keep in ("ecr", "gar", "acr") else ":"
    logins += f"registry_login() {{ {call}; }}\n"
    text = re.sub(r"^#@login\n", lambda _: logins.split("\n", 1)[1], BOOT_SCRIPT, flags=re.M)
    # no indentation, blank lines or trailing comments (node_copy drops whole-line ones)
    return re.sub(r"^[ \t]+|^\n|[ \t]+# [^'\"`\n]*$", "", text, flags=re.M)


def boot_pull(ref: ImageRef, *, runtime: str, stall_s: int, attempts: int) -> str | None:
    """The boot pull's command line (cloud-init's gpufleet-pull.service runs it as root), or
    None where no pull can start at boot: an archive is on the CLI's machine, and nvcr.io takes
    the user's NGC_API_KEY, which only the CLI has (it pulls later, the key on stdin). It waits
    for the recipe's container step and the runtime (scripts/container_pull_boot.sh)."""
    if ref.is_archive or ref.registry_kind == "ngc":
        return None
    order = "docker podman" if runtime == "auto" else runtime
    return shlex.join(
        ["/bin/bash", BOOT_SCRIPT_PATH, ref.reference, order, BOOT_STATE_DIR]
        + [str(int(stall_s)), str(int(attempts))]
    )
