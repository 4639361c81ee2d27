"""This process's limits: raised to the hard limit where nodes need more, refused above it."""

from __future__ import annotations

import resource

import pytest

from gpufleet.core import limits
from gpufleet.core.errors import ClientLimit

INF = resource.RLIM_INFINITY


@pytest.fixture
def rlimits(monkeypatch):
    """The process's limits as a dict (which -> (soft, hard)); setrlimit calls recorded."""
    now = {resource.RLIMIT_NOFILE: (1024, 524288), resource.RLIMIT_NPROC: (INF, INF)}
    calls = []

    def setrlimit(which, pair):
        calls.append((which, pair))
        if pair[0] == INF and now[which][1] == INF:
            raise ValueError("not allowed to raise maximum limit")  # macOS: above OPEN_MAX
        now[which] = pair

    monkeypatch.setattr(limits.resource, "getrlimit", lambda which: now[which])
    monkeypatch.setattr(limits.resource, "setrlimit", setrlimit)
    return now, calls


def test_the_soft_limit_is_raised_to_the_hard_one_when_the_nodes_need_more(rlimits):
    now, calls = rlimits
    limits.ensure(500)  # 64 + 3 x 500 fds: over the soft 1024
    assert now[resource.RLIMIT_NOFILE] == (524288, 524288)
    limits.ensure(100)
    assert len(calls) == 1  # enough already: nothing set


def test_above_the_hard_limit_nothing_starts_and_the_fix_is_named(rlimits):
    now, calls = rlimits
    now[resource.RLIMIT_NOFILE] = (1024, 4096)
    with pytest.raises(ClientLimit) as e:
        limits.ensure(2000)
    assert (e.value.limit, e.value.need, e.value.have) == (
        "open files (RLIMIT_NOFILE)",
        limits.fds_needed(2000),
        4096,
    )
    assert "ulimit -Hn" in (e.value.hint or "") and "--tree" in (e.value.hint or "")
    assert calls == []


def test_an_unlimited_hard_limit_gets_what_the_nodes_need(rlimits):
    now, _ = rlimits
    now[resource.RLIMIT_NOFILE] = (256, INF)
    limits.ensure(300)
    assert now[resource.RLIMIT_NOFILE] == (limits.fds_needed(300), INF)


def test_threads_are_checked_too(rlimits):
    now, _ = rlimits
    now[resource.RLIMIT_NPROC] = (100, 200)
    with pytest.raises(ClientLimit, match="RLIMIT_NPROC"):
        limits.ensure(50)


def test_a_group_and_a_create_are_refused_before_anything_is_opened(rlimits, monkeypatch, tmp_path):
    from gpufleet.clusters import ops
    from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.core import state
    from gpufleet.remote.group import Group

    now, _ = rlimits
    now[resource.RLIMIT_NOFILE] = (64, 64)
    monkeypatch.setenv("GPUFLEET_HOME", str(tmp_path))
    nodes = [NodeInfo(name=f"node-{i}", private_ip=f"10.0.0.{i}") for i in range(4)]
    info = ClusterInfo(
        name="c", cloud="local", ssh_user="u", ssh_key_path="k", known_hosts_path="kh", nodes=nodes
    )
    with pytest.raises(ClientLimit):
        Group(info)
    with pytest.raises(ClientLimit):
        ops.create(ClusterSpec(name="c", cloud="local", nodes=4), lambda _m: None)
    assert not state.known("c")


def test_commands_at_once_on_each_node_count(rlimits):
    """The holder serves several requests on its connections: each one's channels count."""
    now, _ = rlimits
    now[resource.RLIMIT_NOFILE] = (1024, 1024)
    limits.ensure(200)
    with pytest.raises(ClientLimit):
        limits.ensure(200, commands=4)
