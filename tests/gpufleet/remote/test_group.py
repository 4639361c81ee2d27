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
