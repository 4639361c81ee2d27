"""Pin the host keys new cloud nodes published (hostkeychannels) before anyone connects to them."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError
from gpufleet.provision.hostkeychannels import Channel, channel, pinned_key

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import ClusterInfo

# GPUFLEET_HOST_KEYS=bootstrap: the stack makes each node's host key and its user data carries
# it until first contact (remote/hostkeys.py replaces it), for a machine without the cloud's CLI.
ENV = "GPUFLEET_HOST_KEYS"
CALL_S = 60.0  # one call of the cloud's CLI
POLL_S = 10.0
CALLS_AT_ONCE = 16  # cloud CLI processes in flight at once, per poll round


class HostKeysUnpublished(GpufleetError):
    """A node's host key could not be read from its cloud's channel: it is never trusted."""

    exit_code = ExitCode.HOST_KEY


def _fallback_hint(ch: Channel) -> str:
    return (
        f"{ch.install}; or run with {ENV}=bootstrap: then the stack makes each node's host key "
        "and the node's user data carries it until the first contact replaces it"
    )


def bootstrap_asked(env: dict[str, str] | None = None) -> bool:
    """The user chose the bootstrap-key path (a host key in user data until first contact)."""
    value = (os.environ if env is None else env).get(ENV, "")
    if value not in ("", "bootstrap", "channel"):
        raise GpufleetError(
            f"{ENV}={value!r} unknown",
            hint=f"{ENV}=bootstrap, or unset it",
            exit_code=ExitCode.USAGE,
        )
    return value == "bootstrap"


def require_channel(cloud: str, which: Callable[[str], str | None] = shutil.which) -> None:
    """Refuse before anything is created when the cloud's channel cannot be read from here."""
    ch = channel(cloud)
    if ch is not None and which(ch.tool) is None:
        raise HostKeysUnpublished(
            f"{ch.tool} is not on PATH: gpufleet reads each new node's host key from {ch.what} "
            "with it, and connects to no node whose key it has not pinned",
            hint=_fallback_hint(ch),
        )


def _call(argv: list[str]) -> tuple[bool, str]:
    """(succeeded, stdout or the error's last line): the edge, one CLI call."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=CALL_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if r.returncode != 0:
        return False, (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
    return True, r.stdout


def read_keys(
    cloud: str,
    at: dict[str, str],
    progress: Callable[[str], None],
    timeout: float,
    *,
    call: Callable[[list[str]], tuple[bool, str]] = _call,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, str]:
    """node name -> its ed25519 host key ('type base64'), read from the channel at `at[name]`
    until every node has published one or `timeout` passes (HostKeysUnpublished)."""
    ch = channel(cloud)
    assert ch is not None, cloud
    deadline = clock() + timeout
    found: dict[str, str] = {}
    last: dict[str, str] = {}  # node -> why it has no key yet
    progress(f"reading {len(at)} nodes' host keys from {ch.what}")
    while True:
        pending = [(n, ref) for n, ref in at.items() if n not in found]
        # One cloud CLI call per node, a second or two each: a round asks them all at once.
        with ThreadPoolExecutor(max_workers=min(CALLS_AT_ONCE, len(pending))) as pool:
            answers = list(pool.map(lambda item: call(ch.command(item[1])), pending))
        for (name, _ref), (ok, out) in zip(pending, answers, strict=True):
            key = pinned_key(ch.parse(out)) if ok else None
            if key:
                found[name] = key
            elif not ok and last.get(name) != out:
                progress(f"{name}: {ch.tool}: {out}")  # once per new error, then keep asking
            last[name] = out if not ok else "no ed25519 host key yet"
        if len(found) == len(at):
            return found
        if clock() + POLL_S > deadline:
            missing = sorted(set(at) - set(found))
            raise HostKeysUnpublished(
                f"no host key from {ch.what} within {timeout:.0f}s for "
                + ", ".join(f"{n} ({last.get(n)})" for n in missing),
                hint="a custom image needs cloud-init (keys_to_console) or, on GCP, "
                "google-guest-agent; Azure needs boot diagnostics on; " + _fallback_hint(ch),
            )
        sleep(POLL_S)


def pin_published(
    info: ClusterInfo, at: dict[str, str], progress: Callable[[str], None], timeout: float, **kw
) -> None:
    """Pin the keys the nodes of `info` without one published, in info and known_hosts."""
    from gpufleet.remote import knownhosts

    todo = {n.name: at.get(n.name, "") for n in info.nodes if not n.host_key}
    if "" in todo.values():
        raise HostKeysUnpublished(
            f"{info.name}: no host key and nowhere to read one for "
            + ", ".join(sorted(k for k, v in todo.items() if not v)),
            hint="the stack's nodes output lacks host_key_at: `gpufleet down` it and create it"
            " again with this gpufleet",
        )
    if not todo:
        return
    keys = read_keys(info.cloud, todo, progress, timeout, **kw)
    for n in info.nodes:
        if n.name in keys:
            n.host_key, n.bootstrap_host_key = keys[n.name], False
    knownhosts.write(info.known_hosts_path, knownhosts.render(info.nodes))
