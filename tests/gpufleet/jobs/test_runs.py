"""Run records: what a run cost, from the record alone."""

from __future__ import annotations

import pytest

from gpufleet.jobs.runs import RunRecord


def record(**kw) -> RunRecord:
    base = {
        "id": "r1",
        "cluster": "c",
        "cloud": "aws",
        "nodes": 2,
        "launcher": "torchrun",
        "command": ["train.py"],
        "started_at": 1000.0,
    }
    return RunRecord(**{**base, **kw})


def test_cost_is_the_hourly_price_times_the_wall_time():
    rec = record(ended_at=1000.0 + 1800, usd_per_hour=64.0)
    assert rec.cost_usd == pytest.approx(32.0)
    assert rec.as_dict()["cost_usd"] == rec.cost_usd


def test_cost_of_an_unpriced_run_is_unknown_and_a_local_one_free():
    assert record(ended_at=2000.0).cost_usd is None
    assert record(ended_at=2000.0, usd_per_hour=0.0).cost_usd == 0.0


def write_record(run_id: str, **kw) -> None:
    import json

    from gpufleet.jobs import runs

    runs.run_dir(run_id).mkdir(parents=True)
    data = record(id=run_id, **kw).as_dict()
    (runs.run_dir(run_id) / runs.RECORD).write_text(json.dumps(data))


def test_a_running_record_whose_pid_was_reused_is_lost(gpufleet_home):
    """Linux reuses PIDs: a live process with the run's PID but another start time is not it."""
    import os

    from gpufleet.core import state
    from gpufleet.jobs import runs

    write_record("same", pid=os.getpid())
    write_record("reused", pid=os.getpid(), pid_started=str(int(state.start_time(os.getpid())) - 1))
    assert runs.load("same").status == "running"
    assert runs.load("reused").status == "lost"


def test_records_from_before_start_times_still_load(gpufleet_home):
    import json
    import os
    import subprocess

    from gpufleet.jobs import runs

    dead = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout
    for run_id, pid in (("old-live", os.getpid()), ("old-dead", int(dead))):
        write_record(run_id, pid=pid)
        path = runs.run_dir(run_id) / runs.RECORD
        data = json.loads(path.read_text())
        del data["pid_started"]
        path.write_text(json.dumps(data))
    assert runs.load("old-live").status == "running"
    assert runs.load("old-live").pid_started is None
    assert runs.load("old-dead").status == "lost"
