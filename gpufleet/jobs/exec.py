"""`exec`'s work: one command on every node at once (holder, tree or Group), and its exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord
    from gpufleet.remote.session import Stream


def run_on_nodes(
    info: ClusterRecord,
    command: list[str],
    nodes: list[str],
    timeout: float | None,
    stream: Stream | None,
    tree: bool = False,
) -> dict[str, Any]:
    """Run `command` on `nodes` (all when empty): through the head's tree, a warm holder, or
    connections made here (leaving a holder for the next command); node -> HostResult."""
    from gpufleet.remote import holder

    cmd = " ".join(command)  # as ssh and pdsh do: the remote shell interprets the words
    results = None
    if tree:
        from gpufleet.core.errors import GpufleetError
        from gpufleet.remote.tree import run_tree

        if timeout is not None:
            raise GpufleetError(
                "--timeout is not supported with --tree",
                hint="drop one of the two",
                exit_code=ExitCode.USAGE,
            )
        results = run_tree(info, cmd, nodes or None, stream)
    elif holder.enabled():
        every = nodes or [n.name for n in info.nodes]
        results = holder.request(info.name, cmd, every, timeout, stream)
    if results is None:  # cold: connect from here, and leave a holder for the next command
        from gpufleet.remote import Group

        with Group(info, nodes or None) as g:
            results = g.run(cmd, stream=stream, check=False, timeout=timeout)
        if holder.enabled():
            holder.spawn(info.name)
    return results


def exit_code(results: dict[str, Any]) -> int:
    """exec's exit status: never a node's own code, which could read as one of gpufleet's.

    UNREACHABLE when a node gave no exit status (connection failed or lost), else TIMEOUT
    when --timeout killed the command, else JOB_FAILED when a command exited non-zero.
    """
    failed = [r for r in results.values() if not r.ok]
    if not failed:
        return ExitCode.OK
    no_status = [r for r in failed if r.exit_code is None]
    if any(not (r.error or "").startswith("timed out") for r in no_status):
        return ExitCode.UNREACHABLE
    if no_status:
        return ExitCode.TIMEOUT
    return ExitCode.JOB_FAILED
