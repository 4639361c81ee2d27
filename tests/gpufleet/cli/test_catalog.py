"""`gpufleet catalog` through the real CLI: table, --json, filters, unknown cloud."""

from __future__ import annotations

import json
import subprocess
import sys

from gpufleet.cli.catalog import network, row
from gpufleet.components.catalog import InstanceType, lookup
from tests.integration.conftest import ROOT


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "catalog", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def as_json(*args: str) -> list[dict]:
    r = cli("--json", *args)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1 and doc["kind"] == "catalog"
    return doc["instance_types"]


def test_json_lists_every_type_with_price_and_fabric():
    rows = as_json()
    assert len(rows) >= 25
    assert {r["cloud"] for r in rows} == {"aws", "gcp", "azure"}
    assert all(r["price_per_hour"] > 0 and r["price_region"] and r["fabric"] for r in rows)
    assert set(rows[0]) == set(InstanceType.__dataclass_fields__)
    p5 = next(r for r in rows if r["name"] == "p5.48xlarge")
    assert (p5["gpus"], p5["efa_interfaces"], p5["nvswitch"]) == (8, 32, True)


def test_filters_by_cloud_and_gpu():
    rows = as_json("--cloud", "aws", "--gpu", "H100")
    assert [r["name"] for r in rows] == ["p5.48xlarge", "p5.4xlarge"]
    h100 = as_json("--gpu", "h100")  # any case
    assert {r["cloud"] for r in h100} == {"aws", "gcp", "azure"}
    assert all("H100" in r["gpu_model"] for r in h100)
    azure = as_json("--cloud", "azure")
    assert azure and {r["cloud"] for r in azure} == {"azure"}


def test_table_shows_nic_layout_and_prices():
    r = cli("--cloud", "gcp")
    assert r.returncode == 0, r.stderr
    assert "a3-highgpu-8g" in r.stdout and "88.490" in r.stdout
    assert "tcpx +4 NICs" in r.stdout and "tcpxo +8 NICs" in r.stdout
    assert "p4d.24xlarge" not in r.stdout


def test_a_filter_without_a_match_is_bad_input():
    for json_flag in ((), ("--json",)):
        r = cli("--gpu", "Z999", *json_flag)
        assert r.returncode == 2, r.stderr
        assert "gpu: no instance type has a GPU matching 'Z999'" in r.stderr and "H100" in r.stderr


def test_unknown_cloud_is_a_clear_error():
    r = cli("--cloud", "ibm")
    assert r.returncode == 2 and "'ibm'" in r.stderr and "aws, gcp, azure" in r.stderr


def test_rows_render_the_nic_layout():
    p4d = lookup("aws", "p4d.24xlarge")
    assert row(p4d) == (
        "aws",
        "p4d.24xlarge",
        "8 x A100-SXM4-40GB",
        "40",
        "96",
        "1152",
        "efa x4",
        "yes",
        "21.958",
        "us-east-1",
    )
    assert network(lookup("gcp", "a3-megagpu-8g")) == "tcpxo +8 NICs"
    assert network(lookup("azure", "Standard_ND96asr_v4")) == "infiniband"
