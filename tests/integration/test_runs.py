"""`gpufleet runs` / `logs` and run's --timeout, on a real sandbox (--max-cost: test_validation)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from tests.integration.conftest import ROOT, cli_env, gpufleet, requires_sshd

pytestmark = requires_sshd


def runs(home) -> list[dict]:
    r = gpufleet(home, "runs", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["schema"], doc["kind"]) == (1, "run-list")
    return doc["runs"]


def test_a_run_is_listed_and_its_log_kept_per_node(gpufleet_home, tmp_path):
    r = gpufleet(gpufleet_home, "run", "--nodes", "2", "--name", "logged", "--workdir",
                 str(tmp_path), "--launcher", "none", "--", "echo out-$GPUFLEET_NODE_RANK;",
                 "echo err-$GPUFLEET_NODE_RANK >&2")  # fmt: skip
    assert r.returncode == 0, r.stderr
    (rec,) = runs(gpufleet_home)
    assert (rec["cluster"], rec["nodes"], rec["exit_code"], rec["status"]) == (
        "logged",
        2,
        0,
        "succeeded",
    )
    assert rec["ended_at"] >= rec["started_at"] and rec["cost_usd"] == 0.0
    assert (gpufleet_home / "runs" / rec["id"] / "output.log").is_file()
    log = gpufleet(gpufleet_home, "logs", rec["id"][:5]).stdout.splitlines()  # a prefix works
    for line in ("[node-0] out-0", "[node-1] out-1", "[node-0] err-0", "[node-1] err-1"):
        assert line in log
    only = gpufleet(gpufleet_home, "logs", rec["id"], "--node", "node-1").stdout.splitlines()
    assert sorted(only) == ["[node-1] err-1", "[node-1] out-1"]
    r = gpufleet(gpufleet_home, "runs")
    assert rec["id"] in r.stdout and "succeeded" in r.stdout


def test_a_failed_run_records_its_exit_code(gpufleet_home, tmp_path):
    r = gpufleet(gpufleet_home, "run", "--nodes", "2", "--workdir", str(tmp_path),
                 "--launcher", "none", "--", "exit 3")  # fmt: skip
    assert r.returncode == 1  # the job's failure; its own code is in the record
    (rec,) = runs(gpufleet_home)
    assert (rec["exit_code"], rec["job_exit_code"], rec["status"]) == (1, 3, "failed")


def test_logs_follow_streams_a_running_job_until_it_ends(gpufleet_home, tmp_path):
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpufleet",
            "run",
            "--nodes",
            "2",
            "--workdir",
            str(tmp_path),
            "--launcher",
            "none",
            "--",
            "echo early; sleep 4; echo late",
        ],  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli_env(gpufleet_home),
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 120
        while not (found := runs(gpufleet_home)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert found and found[0]["status"] == "running"
        r = gpufleet(gpufleet_home, "logs", found[0]["id"], "--follow", timeout=180)
        assert r.returncode == 0, r.stderr
        assert "[node-0] late" in r.stdout and "[node-1] late" in r.stdout
        assert job.wait(timeout=60) == 0
        assert runs(gpufleet_home)[0]["status"] == "succeeded"
    finally:
        if job.poll() is None:
            job.terminate()
            job.wait(timeout=60)


def test_timeout_stops_the_job_tears_down_and_exits_124(gpufleet_home, tmp_path):
    r = gpufleet(gpufleet_home, "run", "--nodes", "2", "--name", "slow", "--workdir",
                 str(tmp_path), "--timeout", "5s", "--launcher", "none", "--", "sleep 300",
                 timeout=180)  # fmt: skip
    assert r.returncode == 124, r.stderr
    assert "timed out after 5s" in r.stderr
    (rec,) = runs(gpufleet_home)
    assert (rec["exit_code"], rec["status"]) == (124, "timed out")
    assert json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"] == []
