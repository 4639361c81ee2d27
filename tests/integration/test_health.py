"""Health checks on a real 3-node sandbox: per-node verdicts, the gloo probe, the gate."""

from __future__ import annotations

import json

import pytest

from gpufleet.jobs import health
from gpufleet.remote import Group
from tests.integration.conftest import gpufleet, requires_sshd, requires_torch

pytestmark = requires_sshd


def test_health_reports_every_node_with_the_reason(make_sandbox, gpufleet_home):
    make_sandbox("t", 3)
    r = gpufleet(gpufleet_home, "health", "t", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and [n["name"] for n in doc["nodes"]] == ["node-0", "node-1", "node-2"]
    for node in doc["nodes"]:
        assert node["ok"] and node["checks"][0]["detail"].startswith("no GPUs expected")


@requires_torch
def test_fabric_probe_prints_gloo_bus_bandwidth_for_three_nodes(make_sandbox, gpufleet_home):
    make_sandbox("t", 3)
    r = gpufleet(gpufleet_home, "health", "t", "--fabric", "--json", timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    probe = json.loads(r.stdout)["fabric_probe"]
    assert probe["backend"] == "gloo" and probe["world_size"] == 3
    assert len(probe["results"]) == 3 and all(x["busbw_gbps"] > 0 for x in probe["results"])


def test_gate_refuses_and_names_failing_nodes(make_sandbox, monkeypatch):
    info = make_sandbox("t", 2)
    # Expect 8 GPUs on nodes that have none: every node must fail, by name, with the reason.
    monkeypatch.setattr(health, "expected_for", lambda _info: health.Expected(gpus=8))
    with Group(info) as g, pytest.raises(health.UnhealthyCluster) as e:
        health.gate(info, g)
    assert [h.node for h in e.value.failed] == ["node-0", "node-1"]
    assert "nvidia-smi not found" in str(e.value)


def test_run_with_health_gate_starts_on_a_healthy_cluster(make_sandbox, gpufleet_home, tmp_path):
    make_sandbox("t", 2)
    r = gpufleet(
        gpufleet_home, "run", "--cluster", "t", "--workdir", str(tmp_path), "--health-gate",
        "--launcher", "none", "--", "echo", "started",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "[node-0] started" in r.stdout and "[node-1] started" in r.stdout
