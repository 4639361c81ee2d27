"""`gpufleet.clusters.sweep` called from Python: the same leftovers and refusals as the command."""

from __future__ import annotations

import time

import pytest

from gpufleet.clusters.sweep import leftover_clusters, sweep
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError
from tests.gpufleet.cli.test_sweep import HOUR, destroyed, fake_backend, outputs, record, scene


@pytest.fixture
def backend(gpufleet_home, monkeypatch):
    """The fake Automation API of the command's tests (tests/gpufleet/cli/test_sweep.py)."""
    return fake_backend(monkeypatch)


def test_leftovers_are_dead_runs_and_damaged_records_never_one_being_created(backend):
    scene(backend)
    state.cluster_dir("broken").mkdir(parents=True)
    (state.cluster_dir("broken") / "cluster.json").write_text("{not json")
    with state.lock("making"):
        assert sorted(leftover_clusters()) == [
            ("broken", "its record is damaged"),
            ("run-dead", "its `run` is dead"),
        ]


def test_stacks_go_only_when_yes_or_confirmed_and_a_dry_run_removes_nothing(backend):
    scene(backend)
    lines: list[str] = []
    assert sweep(lines.append, dry_run=True) == 5  # a dead run's cluster, four stale stacks
    assert backend.calls == [] and "run-dead" in state.names()
    with pytest.raises(GpufleetError, match="4 cloud stacks to destroy; not asked") as e:
        sweep(lines.append)  # no `yes`, nobody to ask: no stale stack goes
    # the dead run's cluster went (with its own stack) before the question of the others
    assert e.value.exit_code == 2 and destroyed(backend) == {"run-dead"}
    asked: list[str] = []
    assert sweep(lines.append, confirm=asked.append) == 4
    assert asked == ["destroy 4 cloud stacks?"]
    assert destroyed(backend) == {"run-dead", "no-record", "half-made", "kept-expired", "t-image"}
    assert set(backend.outputs) == {"kept-up", "run-live"}


def test_an_image_bake_goes_once_its_bake_died_never_while_it_runs(backend):
    """Issue 19, item 22: sweep skipped every `<stack>-image` stack, so the builder of a
    killed `gpufleet image bake` (a p5.48xlarge for `--stack aws-p5`) billed until someone
    found it. A bake holds its name's lock while it runs (cli/image.py)."""
    bake = {"image_id": "ami-1", "expires_at": time.time() + 3600, "gpufleet_kind": "bake"}
    backend.outputs.update({"p5-image": bake, "g5-image": bake})
    lines: list[str] = []
    with state.lock("g5-image"):  # `image bake --stack g5` is running
        assert sweep(lines.append, yes=True) == 1
    assert destroyed(backend) == {"p5-image"}
    assert set(backend.outputs) == {"g5-image"}
    assert lines[0] == (
        "stack p5-image (cluster p5-image): an image bake no live `gpufleet image bake` here holds"
    )


def test_a_recorded_cluster_named_like_a_bake_is_never_swept(backend):
    """Review of issue 19: a cluster's stack was taken for a bake's by its name (`-image`, the
    cluster name == the stack name), before the record was asked, so `sweep --yes` destroyed a
    live, recorded `llama-image`. Records made before the spec refused such names still exist;
    a bake's stack is known by its gpufleet_kind output instead."""
    now = time.time()
    record("llama-image", now + HOUR)  # `up`: kept on purpose
    record("qwen-image", now + HOUR)
    state.set_owner("qwen-image")  # a live `run` (this process)
    backend.outputs.update(
        {
            "llama-image": outputs("llama-image", now + HOUR),
            "qwen-image": outputs("qwen-image", now + HOUR),
        }
    )
    lines: list[str] = []
    assert sweep(lines.append, yes=True) == 0
    assert destroyed(backend) == set() and lines == []
    assert set(backend.outputs) == {"llama-image", "qwen-image"}
