"""exec in the CLI: the fast path's parsing (and what it leaves to typer), the failure lines."""

from __future__ import annotations

import pytest

from gpufleet.cli.exec import failures, parse_fast


def test_parses_the_common_forms():
    assert parse_fast(["exec", "t", "--", "hostname"]) == {
        "name": "t", "nodes": [], "timeout": None, "json": False, "tree": None,
        "command": ["hostname"],
    }  # fmt: skip
    assert parse_fast(["exec", "t", "--tree", "--", "true"])["tree"] is True
    assert parse_fast(["exec", "t", "--no-tree", "--", "true"])["tree"] is False
    got = parse_fast(["exec", "t", "--node", "node-1", "--node", "2", "--timeout", "5", "--json",
                      "--", "echo", "a b"])  # fmt: skip
    assert got["nodes"] == ["node-1", "2"] and got["timeout"] == 5.0 and got["json"]
    assert got["command"] == ["echo", "a b"]


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "--help"],
        ["exec", "t", "hostname"],  # no --: typer decides
        ["exec", "t", "--verbose", "--", "true"],
        ["exec", "t", "--timeout", "soon", "--", "true"],
        ["exec", "t", "--node"],
        ["run", "--", "x.py"],
        ["exec", "t", "--"],
        ["exec", "t", "--tree", "--no-tree", "--", "true"],  # typer says which one wins
    ],
)
def test_anything_else_falls_back_to_typer(args):
    assert parse_fast(args) is None


def test_failures_name_each_node_then_the_count_and_the_first():
    from gpufleet.core.errors import HostResult

    ok = HostResult("node-0", 0, finished=1.0)
    four = HostResult("node-1", 4, finished=3.0)
    lost = HostResult("node-2", None, error="lost: its SSH connection dropped", finished=2.0)
    assert failures({"node-0": ok}) == ""
    assert failures({r.node: r for r in (ok, four, lost)}) == (
        "gpufleet: node-1: exit 4\n"
        "gpufleet: node-2: lost: its SSH connection dropped\n"
        "gpufleet: failed on 2/3 nodes, first node-2\n"
    )
