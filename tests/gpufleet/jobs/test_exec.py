"""exec's work: its exit code is gpufleet's own."""

from __future__ import annotations


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
