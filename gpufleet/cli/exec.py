"""`exec` once parsed (typer's command and the fast path): stream or --json, failures, exit code."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.core.state import ClusterRecord


def run_exec(
    info: ClusterRecord,
    command: list[str],
    nodes: list[str],
    timeout: float | None,
    as_json: bool,
    tree: bool | None = None,
    container: ContainerSpec | None = None,
) -> int:
    """Run, stream `[node-K] line` (or print a JSON map), report failures; the exit code."""
    from gpufleet.cli.common import node_printer, print_json, progress
    from gpufleet.cli.documents import envelope  # stdlib only: the fast path stays fast
    from gpufleet.jobs.exec import exit_code, run_on_nodes

    stream = None if as_json else node_printer()
    results = run_on_nodes(info, command, nodes, timeout, stream, tree, container, progress)
    if as_json:
        print_json(envelope("exec", cluster=info.name, nodes=rows(info, results)))
    else:
        sys.stderr.write(failures(results))
    return exit_code(results)


def rows(info: ClusterRecord, results: dict[str, Any]) -> list[dict[str, Any]]:
    """--json's `nodes`: one row per node, in the cluster's order."""
    order = {n.name: i for i, n in enumerate(info.nodes)}
    return [
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


def failures(results: dict[str, Any]) -> str:
    """The stderr lines after a run: each failed node's error, then a count and the first."""
    failed = [r for r in results.values() if not r.ok]
    if not failed:
        return ""
    first = min(failed, key=lambda r: r.finished)
    lines = [f"gpufleet: {r.node}: {r.error or f'exit {r.exit_code}'}\n" for r in failed]
    lines.append(f"gpufleet: failed on {len(failed)}/{len(results)} nodes, first {first.node}\n")
    return "".join(lines)


def parse_fast(args: list[str]) -> dict[str, Any] | None:
    """`exec NAME [--node N]... [--timeout S] [--json] [--tree|--no-tree] -- CMD...` parsed
    without typer; None for anything else (help, odd spellings, both --tree and --no-tree),
    which then goes through typer. tree: True, False, or None (the default by node count)."""
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
        "tree": None,
    }
    rest = iter(head[1:])
    for a in rest:
        if a == "--json":
            out["json"] = True
        elif a in ("--tree", "--no-tree"):
            if out["tree"] is not None:
                return None
            out["tree"] = a == "--tree"
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
