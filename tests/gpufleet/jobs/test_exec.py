"""exec's fast path: what it parses itself, and what it leaves to typer."""

from __future__ import annotations

import pytest

from gpufleet.jobs.exec import parse_fast


def test_parses_the_common_forms():
    assert parse_fast(["exec", "t", "--", "hostname"]) == {
        "name": "t", "nodes": [], "timeout": None, "json": False, "tree": False,
        "command": ["hostname"],
    }  # fmt: skip
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
    ],
)
def test_anything_else_falls_back_to_typer(args):
    assert parse_fast(args) is None


def test_exit_code_is_gpufleets_never_a_nodes():
    from gpufleet.components.exitcodes import ExitCode
    from gpufleet.core.errors import HostResult
    from gpufleet.jobs.exec import exit_code

    def res(*rs: HostResult) -> dict[str, HostResult]:
        return {r.node: r for r in rs}

    ok, four = HostResult("node-0", 0), HostResult("node-1", 4)
    slow = HostResult("node-1", None, error="timed out after 5s")
    lost = HostResult("node-2", None, error="lost: its SSH connection dropped")
    assert exit_code(res(ok)) == ExitCode.OK
    assert exit_code(res(ok, four)) == ExitCode.JOB_FAILED  # a node's 4 is not "no SSH"
    assert exit_code(res(ok, four, slow)) == ExitCode.TIMEOUT
    assert exit_code(res(ok, slow, lost)) == ExitCode.UNREACHABLE
