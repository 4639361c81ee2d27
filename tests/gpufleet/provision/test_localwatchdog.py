"""The sandbox watchdog's reading of a node's end: min(hard expiry, lease), the node's own first."""

from __future__ import annotations

from gpufleet.provision import localwatchdog


def test_a_node_ends_at_the_earlier_of_its_expiry_and_lease(tmp_path):
    ndir = tmp_path / "nodes" / "node-0"
    ndir.mkdir(parents=True)
    assert localwatchdog._node_deadline(tmp_path, "node-0") is None  # no expiry, no lease
    (tmp_path / "expires_at").write_text("2000\n")
    assert localwatchdog._node_deadline(tmp_path, "node-0") == 2000
    (ndir / "lease").write_text("1500\n")
    assert localwatchdog._node_deadline(tmp_path, "node-0") == 1500
    (ndir / "expires_at").write_text("1000\n")  # `extend` wrote the node's own: it wins
    assert localwatchdog._node_deadline(tmp_path, "node-0") == 1000
    (ndir / "expires_at").write_text("garbage")  # unreadable: the cluster's file again
    assert localwatchdog._node_deadline(tmp_path, "node-0") == 1500


def test_recorded_pids_round_trip_and_a_damaged_file_is_none(tmp_path):
    localwatchdog._record_pids(tmp_path, {"watchdog": 10, "node-0": 11})
    assert localwatchdog.recorded_pids(tmp_path) == {"watchdog": 10, "node-0": 11}
    assert [p.name for p in tmp_path.iterdir()] == ["pids.json"]  # no temp file left
    (tmp_path / "pids.json").write_text("{not json")
    assert localwatchdog.recorded_pids(tmp_path) == {}
