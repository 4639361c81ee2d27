"""The state directory: records round-trip, and the light view matches the validated model."""

from __future__ import annotations

import pytest

from components.spec import ClusterInfo, NodeInfo
from gpufleet import state
from gpufleet.errors import ClusterNotFound, GpufleetError


def info() -> ClusterInfo:
    return ClusterInfo(
        name="t", cloud="local", ssh_user="u", ssh_key_path="/k", known_hosts_path="/kh",
        nodes=[NodeInfo(name=f"node-{i}", private_ip=f"127.0.1.{i + 1}",
                        public_ip=f"127.0.1.{i + 1}", ssh_port=2200 + i) for i in range(2)],
    )  # fmt: skip


def test_view_has_the_same_values_as_the_model():
    state.save(info())
    model, view = state.load("t"), state.load_view("t")
    assert view.ssh_user == model.ssh_user and view.known_hosts_path == model.known_hosts_path
    for m, v in zip(model.nodes, view.nodes, strict=True):
        assert (v.name, v.public_ip, v.ssh_port, v.workdir, v.host_key) == (
            m.name, m.public_ip, m.ssh_port, m.workdir, m.host_key,
        )  # fmt: skip
    assert view.node("node-1").ssh_port == 2201 and view.node(0).name == "node-0"
    with pytest.raises(GpufleetError):
        view.node("node-7")


def test_missing_cluster():
    with pytest.raises(ClusterNotFound):
        state.load_view("nope")
