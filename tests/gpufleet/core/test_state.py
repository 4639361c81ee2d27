"""The state directory: records round-trip, and the light view matches the validated model."""

from __future__ import annotations

import pytest

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.core import state
from gpufleet.core.errors import ClusterNotFound, GpufleetError


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


def test_a_second_lock_on_a_name_is_refused_while_the_first_is_held():
    import pytest

    from gpufleet.core.errors import ClusterBusy

    with state.lock("n"):
        assert state.locked("n")
        with pytest.raises(ClusterBusy), state.lock("n"):
            pass
    assert not state.locked("n")
    with state.lock("n"):  # released: free again
        pass


def test_a_damaged_record_is_state_damaged_with_a_fix(gpufleet_home):
    import pytest

    from gpufleet.core.errors import StateDamaged

    d = state.cluster_dir("d")
    d.mkdir(parents=True)
    for text in ("", "{", "[]", '{"nodes": 3}', '{"name": "d", "nodes": [{"x": 1}]}'):
        (d / "cluster.json").write_text(text)
        with pytest.raises(StateDamaged) as e:
            state.load("d")
        assert "gpufleet down d" in e.value.hint
    (d / "cluster.json").unlink()
    with pytest.raises(StateDamaged, match="interrupted"):
        state.load("d")  # a folder without a record, and nobody creating it


def test_state_writes_are_atomic_and_leave_no_temp_files(gpufleet_home):
    path = state.cluster_dir("a") / "x.json"
    state.write_private(path, "one")
    state.write_private(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_an_owner_that_died_makes_the_cluster_an_orphan(gpufleet_home):
    import subprocess

    state.cluster_dir("o").mkdir(parents=True)
    assert not state.orphaned("o")  # no owner: kept on purpose
    state.set_owner("o")
    assert not state.orphaned("o")  # this process is alive
    p = subprocess.Popen(["true"])
    state.set_owner("o", p.pid)
    p.wait()
    assert state.orphaned("o")
