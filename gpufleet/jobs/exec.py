"""`exec`: one command on every node at once; the CLI's typer command and its fast path share it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from gpufleet.components.exitcodes import ExitCode

if TYPE_CHECKING:
    from gpufleet.core.state import ClusterRecord


def run_exec(
    info: ClusterRecord,
    command: list[str],
    nodes: list[str],
    timeout: float | None,
    as_json: bool,
    tree: bool = False,
) -> int:
    """Run, stream `[node-K] line` (or print a JSON map), report failures; the exit code."""
    from gpufleet.cli.common import node_printer, print_json
    from gpufleet.cli.documents import envelope  # stdlib only: the fast path stays fast
    from gpufleet.remote import holder

    cmd = " ".join(command)  # as ssh and pdsh do: the remote shell interprets the words
    stream = None if as_json else node_printer()
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

        # Group reads the view's attributes as ClusterInfo's (remote/group.py, typed for both
        # once it is split)
        with Group(info, nodes or None) as g:  # type: ignore[arg-type]
            results = g.run(cmd, stream=stream, check=False, timeout=timeout)
        if holder.enabled():
            holder.spawn(info.name)
    failed = [r for r in results.values() if not r.ok]
    if as_json:
        order = {n.name: i for i, n in enumerate(info.nodes)}
        rows = [
            {
                "name": r.node,
                "exit_code": r.exit_code,
                "error": r.error,
                "stdout": r.stdout,
                "stderr": r.stderr,
                "started": r.started,
                "finished": r.finished,
            }
            for r in sorted(results.values(), key=lambda r: order.get(r.node, 0))
        ]
        print_json(envelope("exec", cluster=info.name, nodes=rows))
    elif failed:
        first = min(failed, key=lambda r: r.finished)
        for r in failed:
            sys.stderr.write(f"gpufleet: {r.node}: {r.error or f'exit {r.exit_code}'}\n")
        sys.stderr.write(
            f"gpufleet: failed on {len(failed)}/{len(results)} nodes, first {first.node}\n"
        )
    return exit_code(results)


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


def parse_fast(args: list[str]) -> dict[str, Any] | None:
    """`exec NAME [--node N]... [--timeout S] [--json] [--tree] -- CMD...` parsed without typer;
    None for anything else (help, odd spellings), which then goes through typer."""
    if len(args) < 4 or args[0] != "exec" or "--" not in args:
        return None
    split = args.index("--")
    head, command = args[1:split], args[split + 1 :]
    if not command or not head or head[0].startswith("-"):
        return None
    out: dict[str, Any] = {
        "name": head[0],
        "nodes": [],
        "timeout": None,
        "json": False,
        "tree": False,
    }
    rest = iter(head[1:])
    for a in rest:
        if a in ("--json", "--tree"):
            out[a[2:]] = True
        elif a in ("--node", "--timeout"):
            value = next(rest, None)
            if value is None:
                return None
            if a == "--node":
                out["nodes"].append(value)
            else:
                try:
                    out["timeout"] = float(value)
                except ValueError:
                    return None
        else:
            return None
    out["command"] = command
    return out
