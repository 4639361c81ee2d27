"""Run records: what a run cost, from the record alone."""

from __future__ import annotations

import pytest

from gpufleet.runs import RunRecord


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
