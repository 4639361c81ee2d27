"""Tables like `sky status`: a header, state, age, expiry with its zone, nodes, type, $/h."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.cli.health import _without_protocol
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core import state
from gpufleet.jobs.health import PROBE_MARK
from tests.gpufleet import fakes as clusters

ROOT = Path(__file__).resolve().parents[3]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "GPUFLEET_HOME": str(home), "TZ": "UTC"},
    )  # fmt: skip


def record_aws_cluster(expires_at: float) -> None:
    info = clusters.cluster(n=2).model_copy(
        update={"instance_type": "p4d.24xlarge", "expires_at": expires_at, "name": "big"}
    )
    state.save(info)
    state.save_spec(
        ClusterSpec.from_input(
            {"name": "big", "cloud": "aws", "instance_type": "p4d.24xlarge", "nodes": 2}
        )
    )


def test_empty_list_says_so(gpufleet_home):
    r = cli(gpufleet_home, "list")
    assert r.returncode == 0 and r.stdout.startswith("no clusters")


def test_list_has_a_header_and_expiry_with_time_zone_and_price(gpufleet_home):
    when = time.time() + 3600
    record_aws_cluster(when)
    out = cli(gpufleet_home, "list").stdout
    header = out.splitlines()[1].split()
    assert header == ["NAME", "CLOUD", "STATE", "AGE", "EXPIRES", "NODES", "TYPE", "$/H"]
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("big"))
    assert time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when)) in row
    assert "p4d.24xlarge" in row and "running" in row
    from gpufleet.components.catalog import lookup

    assert f"{2 * lookup('aws', 'p4d.24xlarge').price_per_hour:.2f}" in row


def test_an_expired_cluster_is_listed_as_expired(gpufleet_home):
    record_aws_cluster(time.time() - 60)
    assert "expired" in cli(gpufleet_home, "list").stdout


def test_fabric_probe_protocol_line_is_not_printed():
    seen = []
    emit = _without_protocol(lambda n, line, e: seen.append(line), PROBE_MARK)
    emit("node-0", PROBE_MARK + '{"backend": "gloo"}', False)
    emit("node-0", "size 1048576 ok", False)
    assert seen == ["size 1048576 ok"]


def test_runs_table_is_drawn_like_list(gpufleet_home):
    from gpufleet.jobs import runs

    started = time.time() - 600
    rec = runs.RunRecord(id="r1", cluster="big", cloud="aws", nodes=2, launcher="torchrun",
                         command=["true"], started_at=started, ended_at=started + 60,
                         exit_code=0, status="succeeded", usd_per_hour=60.0)  # fmt: skip
    runs._save(rec)
    out = cli(gpufleet_home, "runs").stdout
    header = out.splitlines()[1].split()
    assert header == ["RUN", "STATUS", "STARTED", "ENDED", "EXIT", "NODES", "CLUSTER", "RESTARTS",
                      "COST"]  # fmt: skip
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("r1"))
    assert time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) in row
    assert "succeeded" in row and "$1.00" in row


def test_list_and_status_say_a_clusters_state_in_one_vocabulary(gpufleet_home):
    """A cloud cluster (its nodes are not asked): "running" in list, status, and their --json."""
    import json

    from gpufleet.cli.documents import CLUSTER_STATES

    record_aws_cluster(time.time() + 3600)
    listed = json.loads(cli(gpufleet_home, "list", "--json").stdout)["clusters"][0]["state"]
    shown = json.loads(cli(gpufleet_home, "status", "big", "--json").stdout)["state"]
    assert listed == shown == "running" and shown in CLUSTER_STATES
    assert cli(gpufleet_home, "status", "big").stdout.startswith("big: running; aws")
