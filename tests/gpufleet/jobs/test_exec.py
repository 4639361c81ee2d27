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


def test_tree_as_asked_else_from_tree_from_nodes_unless_timeout_or_image(monkeypatch):
    from gpufleet.jobs.exec import choose_tree
    from gpufleet.remote import tree

    monkeypatch.delenv("GPUFLEET_TREE_FROM", raising=False)
    monkeypatch.setattr(tree.shutil, "which", lambda _p: "/usr/bin/ssh")
    assert not choose_tree(None, 10_000, None, None)  # the direct path unless asked
    monkeypatch.setenv("GPUFLEET_TREE_FROM", "64")
    big, image = 64, object()
    assert not choose_tree(None, big - 1, None, None) and choose_tree(None, big, None, None)
    assert not choose_tree(None, big, 5.0, None)  # --timeout: the direct path, not refused
    assert not choose_tree(None, big, None, image)  # type: ignore[arg-type]
    assert choose_tree(True, 2, None, None) and not choose_tree(False, big, None, None)
    monkeypatch.setenv("GPUFLEET_TREE_FROM", "4")
    assert choose_tree(None, 4, None, None)
    monkeypatch.setenv("GPUFLEET_TREE_FROM", "0")  # never by default
    assert not choose_tree(None, 10_000, None, None)
    monkeypatch.setattr(tree.shutil, "which", lambda _p: None)  # no OpenSSH here
    monkeypatch.setenv("GPUFLEET_TREE_FROM", "4")
    assert not choose_tree(None, 4, None, None)


def test_tree_only_by_default_gives_way_and_asked_for_is_refused():
    import pytest

    from gpufleet.core.errors import GpufleetError
    from gpufleet.jobs.exec import refuse_tree

    refuse_tree(None, object())  # type: ignore[arg-type]
    with pytest.raises(GpufleetError, match="--tree is not supported with --image"):
        refuse_tree(True, object())  # type: ignore[arg-type]
