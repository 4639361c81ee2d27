"""The node-side lease and hard expiry: the shell that writes them, and its write on every node."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet.core.providers import EXPIRY, LEASE
from gpufleet.core.signals import start_threads

if TYPE_CHECKING:
    from gpufleet.components.clusterinfo import NodeInfo

LEASE_DIR_DEFAULT = "/var/lib/gpufleet"


def state_file_command(name: str, value: str | None) -> str:
    """Write `value` (a shell word or arithmetic expansion that yields epoch seconds) to `name`
    in the node's gpufleet state directory, atomically; None removes the file.

    $GPUFLEET_STATE_DIR names it on the sandbox; real nodes use /var/lib/gpufleet (root's),
    through sudo when the SSH user cannot write there.
    """
    d = f'd="${{GPUFLEET_STATE_DIR:-{LEASE_DIR_DEFAULT}}}"; '
    if value is None:
        return d + f'rm -f "$d/{name}" 2>/dev/null || sudo -n rm -f "$d/{name}"'
    # The same temp-file-and-rename either way: `sudo tee` truncates the file in place, and
    # gpufleet-expire reading it in between would take the empty file for "no override".
    write = """'cat > "$1.tmp" && mv -f "$1.tmp" "$1"' sh"""
    # SSH answers before cloud-init's final stage, where the recipe makes the folder: the first
    # lease of a new cluster must not fail for want of it (seen on `--cloud vm`).
    mkdir = '{ [ -d "$d" ] || mkdir -p "$d" 2>/dev/null || sudo -n mkdir -p "$d"; } && '
    return (
        d + mkdir + f'v="{value}" && {{ echo "$v" | sh -c {write} "$d/{name}" 2>/dev/null '
        f'|| echo "$v" | sudo -n sh -c {write} "$d/{name}"; }}'
    )


def lease_command(seconds: float | None) -> str:
    """The lease: the node removes itself `seconds` from now by ITS clock, at min(hard expiry,
    lease); None: the hard expiry alone applies again.

    The node adds the duration to its own `date +%s`: an absolute epoch from the CLI would
    carry the CLI's clock error into the node's deadline (a CLI clock 300 s slow, or a node's
    300 s fast, and a 300 s lease has lapsed when it is written).
    """
    if seconds is None:
        return state_file_command(LEASE, None)
    return state_file_command(LEASE, f"$(( $(date +%s) + {max(int(seconds), 0)} ))")


def expiry_command(expires_at: float) -> str:
    """A new hard expiry (`gpufleet extend`), which the node's expiry prefers to the one it
    booted with (images/ttl/gpufleet-expire; the sandbox watchdog).

    Absolute, unlike the lease: it is the user's date ("remove it at 18:00"), the one the CLI
    records, shows and counts cost by, and the one GCE's terminationTime holds; a few seconds
    of node clock error move it by as much, where they would make a short lease lapse.
    """
    return state_file_command(EXPIRY, str(int(expires_at)))


def on_every_node(
    nodes: list[NodeInfo], transport: Callable[[NodeInfo], Any], cmd: str, timeout: float
) -> dict[str, str | None]:
    """Run `cmd` on every node on threads of its own over `transport(node)`; node -> None, or
    why it failed (within `timeout`)."""
    out: dict[str, str | None] = {}

    def one(node: NodeInfo) -> None:
        try:
            chan = transport(node).open_session(timeout=timeout)
            chan.settimeout(timeout)
            chan.exec_command(cmd)
            code = chan.recv_exit_status()
            chan.close()
            out[node.name] = None if code == 0 else f"exit {code}"
        except Exception as e:
            out[node.name] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in nodes]
    start_threads(threads)
    for t in threads:
        t.join(timeout)
    return {n.name: out.get(n.name, "timed out") for n in nodes}
