"""The node's preemption watcher (scripts/preempt_watch.sh) and the lines that read its notice."""

from __future__ import annotations

import json
import re
import shlex

from gpufleet.components.resources import data_dir

SCRIPT: str = (data_dir("scripts") / "preempt_watch.sh").read_text()
# The notice file in the node's state folder; on a real node the watcher runs as root and
# writes /var/lib/gpufleet/preempted, on the sandbox the node's folder (GPUFLEET_STATE_DIR).
NOTICE = "preempted"
REBALANCE = "rebalance"  # AWS's rebalance recommendation: advisory, no SIGTERM
MARK = "gpufleet-notice:"
STATE_DIR = "/var/lib/gpufleet"
SCRIPT_PATH = "/opt/gpufleet/preempt_watch.sh"
# Clouds with a notice the watcher reads: the providers whose trait `notices` is not "" (a
# test checks the two agree; components/ never imports gpufleet.core).
CLOUDS = ("aws", "gcp", "azure")
KEYS = ("cloud", "kind", "detail", "noticed_at", "not_before")

_FILE = f'"${{GPUFLEET_STATE_DIR:-{STATE_DIR}}}/{NOTICE}"'
_PRINT = f"printf '{MARK}%s\\n' \"$(tr -d '\\n' < \"$f\")\""


def watch_command(
    cloud: str,
    *,
    state_dir: str = STATE_DIR,
    script_path: str = SCRIPT_PATH,
    url: str | None = None,
    every: float | None = None,
    sandbox: str | None = None,
    node: str | None = None,
) -> list[str]:
    """The watcher's argv (the systemd unit's ExecStart on a cloud node; the sandbox's process)."""
    if cloud not in CLOUDS:
        raise ValueError(f"no preemption notice on {cloud!r}: only {', '.join(CLOUDS)}")
    argv = ["/bin/bash", script_path, "--cloud", cloud, "--state", state_dir]
    argv += ["--url", url] if url else []
    argv += ["--every", f"{every:g}"] if every else []
    argv += ["--sandbox", sandbox, "--node", node or ""] if sandbox else []
    return argv


def notice_command() -> str:
    """A shell line that blocks until the node's notice file exists (polling each second), then
    prints `gpufleet-notice:{json}` and exits 0."""
    return f'f={_FILE}; while [ ! -s "$f" ]; do sleep 1; done; {_PRINT}'


def read_command() -> str:
    """A shell line that prints the notice line if the notice file exists, nothing otherwise."""
    return f'f={_FILE}; if [ -s "$f" ]; then {_PRINT}; fi; true'


def parse(text: str) -> dict | None:
    """The last notice in `text` (the output of notice_command or read_command), or None."""
    for line in reversed(text.splitlines()):
        if not line.startswith(MARK):
            continue
        try:
            doc = json.loads(line[len(MARK) :])
        except ValueError:
            continue
        if isinstance(doc, dict) and all(k in doc for k in KEYS):
            return {k: doc[k] for k in KEYS}
    return None


_BLOCK = re.compile(r"^#@(\w+)\b.*?\n(.*?)^#@end\n", re.M | re.S)


def node_script(cloud: str) -> str:
    """SCRIPT as cloud-init writes it on a `cloud` node: only that cloud's block, without
    comments, indentation or blank lines (EC2 takes 16 KB of user data); tests run this copy."""
    text = _BLOCK.sub(lambda m: m.group(2) if m.group(1) == cloud else "", SCRIPT)
    text = re.sub(r"^[ \t]*#(?!!).*\n", "", text, flags=re.M)
    return re.sub(r"^[ \t]+|^\n|[ \t]+# [^'\"`\n]*$", "", text, flags=re.M)


def unit_exec(cloud: str) -> str:
    """The watcher's command line in its systemd unit (cloud-init, components/bootstrap.py)."""
    return shlex.join(watch_command(cloud))
