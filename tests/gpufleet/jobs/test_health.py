"""Health reports: parsing node output, expectations from the catalog, the gate's error."""

from __future__ import annotations

import json

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.jobs import health


def cluster(cloud="local", it=None, fabric="none") -> ClusterInfo:
    return ClusterInfo(
        name="t", cloud=cloud, instance_type=it, ssh_user="u", ssh_key_path="/k",
        known_hosts_path="/kh", fabric=fabric, python="python3",
        nodes=[NodeInfo(name=f"node-{i}", private_ip=f"10.0.0.{i}", public_ip=f"10.0.0.{i}")
               for i in range(2)],
    )  # fmt: skip


def test_report_is_read_from_the_last_json_line():
    doc = {"ok": False, "checks": [{"name": "gpu_count", "ok": False, "detail": "7 of 8"}]}
    out = "some warning\n" + json.dumps(doc) + "\n"
    h = health.parse_report("node-1", 0, out, None)
    assert not h.ok and h.reasons == ["gpu_count: 7 of 8"]


def test_unreadable_or_unreachable_node_fails_with_the_reason():
    assert health.parse_report("node-0", 1, "Traceback ...", None).error == (
        "check exited 1 without a JSON report"
    )
    h = health.parse_report("node-0", None, "", "SSH connection lost")
    assert not h.ok and h.reasons == ["SSH connection lost"]


def test_sandbox_expects_no_gpus():
    exp = health.expected_for(cluster())
    assert exp.gpus == 0 and exp.fabric == "none"
    assert "--expect-gpus 0 --fabric none" in health.check_command(cluster(), exp)


def test_gate_error_names_failing_nodes():
    bad = health.NodeHealth("node-1", False, [{"name": "ecc", "ok": False, "detail": "2 DBE"}])
    e = health.UnhealthyCluster("t", [bad])
    assert "node-1" in str(e) and "ecc: 2 DBE" in str(e) and e.exit_code == 5
    assert "gpufleet health t" in e.hint


def test_cloud_nodes_are_checked_against_the_catalog():
    c = cluster("aws", "p5.48xlarge", "efa")
    exp = health.expected_for(c)
    assert (exp.gpus, exp.gpu_model, exp.fabric_devices, exp.nvswitch) == (8, "H100", 32, True)
    cmd = health.check_command(c, exp)
    assert "--expect-model H100" in cmd and "--expect-fabric-devices 32" in cmd
    assert "--nvswitch" in cmd and "--expect-memory-gib 80" in cmd
    nd = health.expected_for(cluster("azure", "Standard_ND96asr_v4", "infiniband"))
    assert nd.fabric_devices == 8 and nd.busbw_baseline_gbps is None
