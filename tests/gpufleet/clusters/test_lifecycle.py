"""One lifecycle below the CLI: `up` and `run` create, wait for SSH and roll back through
clusters/lifecycle.py, and run_job called from Python gets the command's budget and record."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.clusters import cost, lifecycle
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.core import signals, state
from gpufleet.core.errors import JobFailed
from gpufleet.core.signals import Interrupted
from gpufleet.jobs import run as job
from gpufleet.jobs import runs
from gpufleet.jobs.launch import LaunchOptions
from tests.gpufleet import fakes


class FakeGroup:
    waits: list[tuple[float, bool]] = []
    fail: BaseException | None = None

    def __init__(self, info):
        self.info = info

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def wait_ready(self, timeout, *, refused_fails=False, progress=None):
        FakeGroup.waits.append((timeout, refused_fails))
        if FakeGroup.fail is not None:
            raise FakeGroup.fail


@pytest.fixture
def calls(monkeypatch):
    """ops.create/destroy and the SSH group, recorded instead of run."""
    seen: list[str] = []
    FakeGroup.waits, FakeGroup.fail = [], None

    def create(spec, progress, *, owner=None, **options):
        seen.append(f"create {spec.name} owner={owner is not None} {options}")
        return fakes.cluster(cloud=spec.cloud, gpus=0).model_copy(update={"name": spec.name})

    monkeypatch.setattr(lifecycle.ops, "create", create)
    monkeypatch.setattr(lifecycle.ops, "destroy", lambda info, p, **o: seen.append("destroy"))
    monkeypatch.setattr(lifecycle, "Group", FakeGroup)
    return seen


def _spec(cloud="local", **kw) -> ClusterSpec:
    return ClusterSpec.from_input({"name": "c", "cloud": cloud, "nodes": 2, **kw})


@pytest.mark.parametrize(("cloud", "wait"), [("local", 30), ("vm", 600)])
def test_up_waits_as_long_as_the_provider_says(calls, cloud, wait):
    lines: list[str] = []
    info = lifecycle.up(_spec(cloud), lines.append, backend="file:///x")
    assert info.name == "c" and FakeGroup.waits == [(wait, False)]
    assert calls == ["create c owner=False {'backend': 'file:///x'}"]
    assert lines[0] == f"creating 2 {cloud} nodes for cluster c"
    assert lines[-1].startswith("cluster c ready in ")


@pytest.mark.parametrize("fault", [TimeoutError("no answer"), KeyboardInterrupt()])
def test_up_removes_what_it_created_when_the_nodes_never_answer(calls, fault):
    FakeGroup.fail = fault
    lines: list[str] = []
    with pytest.raises(type(fault)):
        lifecycle.up(_spec(), lines.append)
    assert calls[1:] == ["destroy"]
    assert lines[-1] == "nodes unreachable: removing what was created"


@pytest.mark.parametrize("keep", [False, True])
def test_a_runs_cluster_is_removed_on_failure_unless_kept(calls, keep):
    lines: list[str] = []
    with pytest.raises(Interrupted), lifecycle.for_run(_spec(), lines.append, keep=keep):
        raise Interrupted(2)
    assert calls[0] == f"create c owner={not keep} {{}}"  # owned by this process unless kept
    if keep:
        assert calls[1:] == [] and lines[-1] == "kept cluster c: remove it with `gpufleet down c`"
    else:
        assert calls[1:] == ["destroy"] and lines[-1] == "tearing down c"


def _request(**kw) -> job.JobRequest:
    opts = LaunchOptions(launcher="none", command=["true"], run_id="r1", master_port=29500)
    return job.JobRequest(launch=opts, workdir=Path(fakes.__file__).parent, **kw)


def test_run_job_from_python_checks_the_budget_before_anything_is_created(monkeypatch):
    monkeypatch.setattr(job, "run_on_cluster", lambda *a: pytest.fail("the job started"))
    spec = _spec("aws", instance_type="p4d.24xlarge", ttl_minutes=600)
    with pytest.raises(cost.OverBudget, match="over 1 USD"):
        job.run_job(_request(spec=spec, max_cost=1.0), print, lambda *a: None)
    assert runs.all_runs() == []  # refused before the run's record


def test_run_job_from_python_records_the_run_and_its_end(monkeypatch):
    state.save(fakes.cluster(cloud="local", gpus=0, n=3))

    def failing(req, progress, stream, on_image=None, on_recovery=None):
        progress("on the nodes")
        stream("node-1", "a line", False)
        raise JobFailed("node-1", 3)

    monkeypatch.setattr(job, "run_on_cluster", failing)
    lines: list[str] = []
    ended: list[runs.RunRecord] = []
    with pytest.raises(JobFailed):
        job.run_job(_request(cluster="t"), lines.append, lambda *a: None, ended.append)
    rec = runs.load("r1")
    assert (rec.status, rec.exit_code, rec.job_exit_code) == ("failed", 1, 3)
    assert (rec.cluster, rec.cloud, rec.nodes, rec.usd_per_hour) == ("t", "local", 3, None)
    assert [r.id for r in ended] == ["r1"] and ended[0].status == "failed"
    assert lines[0] == "run r1 (`gpufleet logs r1`)" and lines[-1].startswith("run r1 failed in")
    assert runs.read_log("r1") == [
        "gpufleet: run r1 (`gpufleet logs r1`)",
        "gpufleet: on the nodes",
        "[node-1] a line",
    ]


def test_run_job_from_python_stops_at_its_deadline(monkeypatch):
    import time

    from gpufleet.core import deadline

    state.save(fakes.cluster(cloud="local", gpus=0, n=2))
    monkeypatch.setattr(job, "run_on_cluster", lambda *a: time.sleep(5) or 0)
    with pytest.raises(deadline.TimedOut):
        job.run_job(_request(cluster="t", timeout_s=0.2), lambda m: None, lambda *a: None)
    rec = runs.load("r1")
    assert (rec.status, rec.exit_code) == ("timed out", 124)


class _Unreachable:
    """A Group whose nodes never answer; closing it records whether signals are held back."""

    closed: list[bool] = []

    def __init__(self, info, **_kw):  # kill_marker=..., as run.py makes its groups
        self.info = info

    def wait_ready(self, *a, **kw):
        raise TimeoutError("no answer")

    def close(self):
        _Unreachable.closed.append(bool(getattr(signals._shielded, "on", False)))


@pytest.mark.parametrize("created", [True, False])
def test_no_signal_lands_between_the_jobs_teardown_and_its_clusters(monkeypatch, created):
    """Old job.py closed the group and removed the cluster in one shielded block; now two
    modules do them. A signal between the two would raise before the cluster's teardown ran,
    leaving it to the garbage collector: the shield stays up from one to the other."""
    shield_at_cluster_exit: list[bool] = []

    class Cluster:
        def __enter__(self):
            return fakes.cluster(cloud="local", gpus=0, n=2)

        def __exit__(self, *exc):
            shield_at_cluster_exit.append(bool(getattr(signals._shielded, "on", False)))
            with signals.shielded():  # for_run's own teardown
                pass

    _Unreachable.closed = []
    monkeypatch.setattr(job, "Group", _Unreachable)
    monkeypatch.setattr(job.lifecycle, "for_run", lambda *a, **kw: Cluster())
    state.save(fakes.cluster(cloud="local", gpus=0, n=2))
    req = _request(spec=_spec()) if created else _request(cluster="t")
    with pytest.raises(TimeoutError):
        job.run_on_cluster(req, lambda m: None, lambda *a: None)
    assert _Unreachable.closed == [True]  # the group closes shielded either way
    assert shield_at_cluster_exit == ([True] if created else [])
    assert not getattr(signals._shielded, "on", False)  # and nothing is left held back


def test_up_from_python_checks_the_budget_before_anything_is_created(calls):
    spec = _spec("aws", instance_type="p4d.24xlarge", ttl_minutes=600)
    with pytest.raises(cost.OverBudget, match="over 1 USD"):
        lifecycle.up(spec, lambda m: None, max_cost=1.0)
    assert calls == []  # nothing created


@pytest.mark.parametrize("both", [False, True])
def test_a_run_request_names_exactly_one_cluster(both):
    from gpufleet.core.errors import GpufleetError

    given = {"cluster": "t", "spec": _spec()} if both else {}
    with pytest.raises(GpufleetError, match="both" if both else "neither") as e:
        _request(**given)
    assert e.value.exit_code == 2 and e.value.hint


def test_a_runs_teardown_removes_the_nodes_saved_last(calls, monkeypatch, gpufleet_home):
    """A recovery replaced node-1 under the run (jobs/recover.py): the teardown destroys the
    cluster as saved (the new node's address), not the info the run was created with."""
    removed: list[object] = []
    monkeypatch.setattr(lifecycle.ops, "destroy", lambda info, p, **o: removed.append(info))
    with lifecycle.for_run(_spec(), lambda _m: None) as info:
        new = info.nodes[1].model_copy(update={"private_ip": "10.9.9.9"})
        state.save(info.model_copy(update={"nodes": [info.nodes[0], new]}))
    assert [n.private_ip for n in removed[0].nodes][1] == "10.9.9.9"  # type: ignore[attr-defined]
