"""`gpufleet catalog` through the real CLI."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.conftest import ROOT


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "catalog", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip


def test_json_lists_every_type_with_price_and_fabric():
    rows = json.loads(cli("--json").stdout)
    priced = [r for r in rows if r["price_per_hour"]]
    assert len(priced) >= 25 and all(r["fabric"] for r in rows)


def test_filters_by_cloud_and_gpu():
    rows = json.loads(cli("--cloud", "aws", "--gpu", "H100", "--json").stdout)
    assert [r["name"] for r in rows] == ["p5.48xlarge"]


def test_table_shows_prices():
    out = cli("--cloud", "gcp").stdout
    assert "a3-highgpu-8g" in out and "88.490" in out and "tcpx" in out


def test_unknown_cloud_is_a_clear_error():
    r = cli("--cloud", "ibm")
    assert r.returncode == 2 and "cloud" in r.stderr and "aws, gcp, azure" in r.stderr
