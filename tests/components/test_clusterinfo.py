"""ClusterInfo keeps its node contract: head-first names, lookup by name or index."""

from __future__ import annotations

import pytest

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo, node_names
from gpufleet.components.errors import GpufleetError


def _info(names: list[str]) -> ClusterInfo:
    return ClusterInfo(
        name="t",
        cloud="local",
        ssh_user="u",
        ssh_key_path="k",
        known_hosts_path="kh",
        nodes=[NodeInfo(name=n, private_ip="10.0.0.1", public_ip="1.2.3.4") for n in names],
    )


def test_cluster_info_requires_head_first_names():
    assert _info(["node-0", "node-1"]).head.name == "node-0"
    with pytest.raises(GpufleetError):
        _info(["node-1", "node-0"])


def test_node_lookup_by_name_or_index():
    info = _info(["node-0", "node-1"])
    assert info.node("1").name == info.node("node-1").name == "node-1"
    with pytest.raises(GpufleetError) as e:
        info.node("node-5")
    assert "node-0, node-1" in e.value.hint


def test_node_names_are_head_first_and_what_cluster_info_requires():
    assert node_names(3) == ["node-0", "node-1", "node-2"]
    assert [n.name for n in _info(node_names(3)).nodes] == node_names(3)
