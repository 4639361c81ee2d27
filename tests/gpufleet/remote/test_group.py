"""The group: the nodes it is made of, and the wait it gives a provider's slow nodes."""

from __future__ import annotations

import pytest

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.remote.group import Group


def _one_node_cluster(**fields) -> ClusterInfo:
    return ClusterInfo(
        name="c",
        ssh_user="u",
        ssh_key_path="k",
        known_hosts_path="kh",
        nodes=[NodeInfo(name="node-0", private_ip="a", public_ip="a")],
        **fields,
    )


def test_group_rejects_unknown_node():
    from gpufleet.core.errors import GpufleetError

    with pytest.raises(GpufleetError):
        Group(_one_node_cluster(cloud="local"), ["node-9"])


@pytest.mark.parametrize(
    ("provider", "result"), [({}, "timed out"), ({"command_timeout_s": 5}, None)]
)
def test_a_provider_with_slow_nodes_gets_a_longer_wait_for_lease_writes(
    monkeypatch, provider, result
):
    """A node that answers a lease write after the default wait (a TCG VM still booting took
    over 20 s) is reported as failed, unless its provider recorded a longer command timeout;
    `extend` writes through the same path."""
    import time

    class SlowChannel:
        def settimeout(self, _t):
            pass

        def exec_command(self, _cmd):
            pass

        def recv_exit_status(self):
            time.sleep(0.6)
            return 0

        def close(self):
            pass

    class Transport:
        def open_session(self, timeout=None):
            return SlowChannel()

    g = Group(_one_node_cluster(cloud="vm", instance_type="vm", provider=provider))
    monkeypatch.setattr(g, "_transport", lambda node: Transport())
    assert g.write_lease(1900000000, timeout=0.2) == {"node-0": result}


class DoneChannel:
    """A session whose command has already ended with exit 0."""

    transport = None  # send_eof: nothing to send on
    closed = eof_received = True

    def __init__(self, log: list[str]):
        self.log = log

    def exec_command(self, cmd):
        self.log.append("exec")

    def recv_ready(self):
        return False

    recv_stderr_ready = exit_status_ready = recv_ready

    def recv_exit_status(self):
        return 0

    def get_transport(self):
        return None

    def close(self):
        pass


class FlakyTransport:
    """Refuses its first `fails` channels, as a tunnel cut by the head's dropped connection."""

    def __init__(self, fails: int, log: list[str]):
        self.fails, self.log = fails, log

    def is_active(self):
        return True

    def open_session(self, timeout=None):
        if self.fails:
            self.fails -= 1
            self.log.append("refused")
            raise EOFError
        return DoneChannel(self.log)


@pytest.mark.parametrize(("fails", "ok"), [(0, True), (2, True), (3, False)])
def test_a_channel_that_fails_before_the_command_is_sent_is_tried_again(monkeypatch, fails, ok):
    """Nothing has run on the node yet, so trying again is safe; three tries in all."""
    import gpufleet.remote.group as group

    monkeypatch.setattr(group, "RETRY_DELAY_S", 0.01)
    log: list[str] = []
    flaky = FlakyTransport(fails, log)
    g = Group(_one_node_cluster(cloud="local"))
    monkeypatch.setattr(g, "_transport", lambda node: flaky)
    result = g.run("true", check=False)["node-0"]
    assert result.ok is ok
    assert log == ["refused"] * min(fails, 3) + (["exec"] if ok else [])
    if not ok:
        assert result.error == "EOFError"


def test_a_command_whose_connection_drops_after_it_was_sent_is_not_sent_again(monkeypatch):
    """It may have run: the node's result says the connection dropped, once."""
    log: list[str] = []

    class DroppedChannel(DoneChannel):
        def exec_command(self, cmd):
            self.log.append("exec")
            raise EOFError

    class Transport(FlakyTransport):
        def open_session(self, timeout=None):
            return DroppedChannel(self.log)

    g = Group(_one_node_cluster(cloud="local"))
    monkeypatch.setattr(g, "_transport", lambda node: Transport(0, log))
    assert not g.run("true", check=False)["node-0"].ok
    assert log == ["exec"]


def test_a_dropped_head_is_reopened_once_per_command(monkeypatch):
    class Dead:
        def is_active(self):
            return False

    g = Group(_one_node_cluster(cloud="local"))
    opened: list[str] = []

    def connect(node):
        opened.append(node.name)
        g._transports[node.name] = Dead()  # drops again at once
        return g._transports[node.name]

    monkeypatch.setattr(g, "_connect", connect)
    g._transports["node-0"] = Dead()
    g._reopens = 1  # inside run()
    head = g.info.nodes[0]
    g._transport(head)
    with pytest.raises(EOFError, match="dropped again"):
        g._transport(head)
    assert opened == ["node-0"]
    g._reopens = None  # outside run(): wait_ready and reconnect have their own rules
    g._transport(head)
    assert opened == ["node-0", "node-0"]


def test_lease_through_the_head_from_tree_from_nodes_and_direct_if_it_cannot(monkeypatch):
    from gpufleet.remote import tree
    from tests.gpufleet.jobs.test_rsync import _info

    monkeypatch.setenv("GPUFLEET_TREE_FROM", "3")
    monkeypatch.setattr(tree.shutil, "which", lambda _p: "/usr/bin/ssh")
    info = _info()
    info.provider, info.cloud = {}, "local"
    info.node = lambda name: next(n for n in info.nodes if n.name == name)
    g = Group(info)  # type: ignore[arg-type]
    asked = []
    monkeypatch.setattr(
        tree, "on_every_node", lambda i, nodes, cmd, t: asked.append(nodes) or {"node-0": None}
    )
    direct = []
    monkeypatch.setattr(
        "gpufleet.remote.group.on_every_node", lambda nodes, *a: direct.append(nodes) or {}
    )
    assert g._on_every_node("true", 5) == {"node-0": None}
    assert asked == [["node-0", "node-1", "node-2"]] and direct == []
    g.subset(["node-1"])._on_every_node("true", 5)  # one node: direct
    assert [n.name for n in direct[0]] == ["node-1"]

    def cannot(*_a):
        raise tree.TreeFailed("node-0", "sh: ssh: not found", started=False)

    monkeypatch.setattr(tree, "on_every_node", cannot)
    g._on_every_node("true", 5)
    assert [n.name for n in direct[1]] == ["node-0", "node-1", "node-2"]
    g.close()
