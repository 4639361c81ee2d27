"""`gpufleet.clusters.sweep` called from Python: the same leftovers and refusals as the command."""

from __future__ import annotations

import pytest

from gpufleet.clusters.sweep import leftover_clusters, sweep
from gpufleet.core import state
from gpufleet.core.errors import GpufleetError
from tests.gpufleet.cli.test_sweep import destroyed, fake_backend, scene


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
    backend.outputs.update({"p5-image": {}, "g5-image": {}})
    lines: list[str] = []
    with state.lock("g5-image"):  # `image bake --stack g5` is running
        assert sweep(lines.append, yes=True) == 1
    assert destroyed(backend) == {"p5-image"}
    assert set(backend.outputs) == {"g5-image"}
    assert lines[0] == (
        "stack p5-image (cluster p5-image): an image bake no live `gpufleet image bake` here holds"
    )
