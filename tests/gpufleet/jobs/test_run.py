"""run_job's mpirun output routing: each rank's line under its node, the head's mpirun checked."""

from __future__ import annotations

import pytest

from gpufleet.core.errors import HostResult, MissingTool, SpecError
from gpufleet.jobs import run as job
from gpufleet.jobs.launch import LaunchOptions
from tests.gpufleet import fakes as clusters

OPTS = LaunchOptions(launcher="mpirun", command=["train.py"], nproc_per_node=1, run_id="r1")


class HeadOnly:
    """A Group whose head answers `mpirun --version` with `out` and `code`."""

    def __init__(self, out: str, code: int | None = 0):
        self.out, self.code, self.asked = out, code, []

    def subset(self, nodes):
        self.asked.append(nodes)
        return self

    def run(self, command, check=True):
        assert command.endswith("mpirun --version") and not check
        return {"node-0": HostResult("node-0", self.code, self.out, "", None, 0.0, 0.0)}


def routed(out: str, lines: list[str]) -> list[tuple[str, str, bool]]:
    seen: list[tuple[str, str, bool]] = []
    info = clusters.cluster(gpus=0, n=3)
    stream = job._mpi_stream(info, OPTS, HeadOnly(out), lambda *a: seen.append(a))
    for line in lines:
        stream("node-0", line, line.startswith("[1,2]"))
    return seen


def test_open_mpi_4_lines_go_to_their_ranks_node_as_written():
    lines = ["[1,1]<stdout>:  File 'x'", "[1,2]<stderr>:boom", "mpirun: a message of its own"]
    assert routed("mpirun (Open MPI) 4.1.4\n", lines) == [
        ("node-1", "  File 'x'", False),
        ("node-2", "boom", True),
        ("node-0", "mpirun: a message of its own", False),
    ]


def test_open_mpi_5_drops_the_space_it_writes_after_the_tag():
    assert routed("mpirun (Open MPI) 5.0.3\n", ["[1,1]<stdout>: hi"]) == [("node-1", "hi", False)]


def test_no_mpirun_on_the_head_is_a_missing_tool():
    with pytest.raises(MissingTool, match="mpirun") as e:
        job._mpi_stream(clusters.cluster(n=2), OPTS, HeadOnly("", 127), print)
    assert "node-0" in e.value.hint and "--launcher torchrun" in e.value.hint


def test_another_mpi_is_refused_with_a_fix():
    """The launch uses Open MPI's flags (-x, --mca, --tag-output): MPICH's hydra has others."""
    with pytest.raises(SpecError, match="not Open MPI"):
        job._mpi_stream(clusters.cluster(n=2), OPTS, HeadOnly("HYDRA build details:\n"), print)


def test_the_launch_line_names_every_node_of_the_job():
    info = clusters.cluster(n=3)
    assert job._launching(info, OPTS, {"node-0": "mpirun ..."}) == (
        "launching mpirun on 3 nodes from node-0 (run r1)"
    )
    torchrun = LaunchOptions(launcher="torchrun", command=["t.py"], run_id="r1")
    every = {n.name: "torchrun ..." for n in info.nodes}
    assert job._launching(info, torchrun, every) == "launching torchrun on 3 nodes (run r1)"


class LeaseGroup:
    """A Group whose nodes answer the lease removal with `answers` (one dict per try)."""

    def __init__(self, answers: list[dict[str, str | None]]):
        self.answers, self.tries = answers, []

    def subset(self, nodes):
        self.tries.append(list(nodes))
        return self

    def write_lease(self, seconds, timeout=20.0):
        assert seconds is None
        return self.answers.pop(0)


def test_kept_cluster_retries_a_failed_lease_removal_once():
    said: list[str] = []
    group = LeaseGroup([{"node-0": None, "node-1": "timed out"}, {"node-1": None}])
    assert job.drop_lease(group, "c1", said.append) == {}
    assert group.tries == [["node-1"]] and said == []


def test_kept_cluster_says_which_nodes_still_hold_a_lease_and_how_to_remove_it():
    said: list[str] = []
    group = LeaseGroup([{"node-0": None, "node-1": "timed out"}, {"node-1": "timed out"}])
    assert job.drop_lease(group, "c1", said.append) == {"node-1": "timed out"}
    assert len(said) == 1 and "node-1 (timed out)" in said[0] and "removes itself" in said[0]
    assert "`gpufleet exec c1 --node node-1 -- sudo rm -f /var/lib/gpufleet/lease`" in said[0]


class JobGroup:
    """A Group for _job: every node reachable, gpufleet may write its lease; records the
    lease writes and the close (faked: the nodes; real: _job's order of work and teardown)."""

    def __init__(self, info):
        from gpufleet.provision import LEASE

        self.nodes, self.may_write, self.leases, self.closed = list(info.nodes), {LEASE}, [], False

    def write_lease(self, seconds):
        self.leases.append(seconds)
        return {n.name: None for n in self.nodes}

    def run(self, command, **kw):
        return {}

    def close(self):
        self.closed = True


class Boxes:
    """RunContainers' face as _job uses it; close() fails as a dead connection's would."""

    run_id, python = "r1", "/opt/conda/bin/python3"

    def __init__(self):
        import types

        self.report = types.SimpleNamespace(image="img:1", digests={"node-0": "sha256:d"})
        self.needed: list[str] = []

    def need_python(self, why):
        self.needed.append(why)

    def wrap(self, node, cmd):
        return f"in-container {cmd}"

    def close(self):
        raise RuntimeError("socket closed")


def _container_job(monkeypatch, tmp_path, gate):
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.core import signals
    from gpufleet.jobs import container

    monkeypatch.setattr(signals._shielded, "on", False, raising=False)  # _job leaves it up
    info = clusters.cluster(n=2)
    group, boxes, said = JobGroup(info), Boxes(), []
    monkeypatch.setattr(job, "Group", lambda _info, **_kw: group)
    monkeypatch.setattr(job.lifecycle, "wait_ready", lambda *a, **k: None)
    monkeypatch.setattr(job.sync, "sync", lambda *a, **k: None)
    monkeypatch.setattr(container, "start", lambda *a, **k: boxes)
    req = job.JobRequest(
        launch=LaunchOptions(launcher="torchrun", command=["t.py"], run_id="r1"),
        workdir=tmp_path,
        cluster="t",
        keep=True,
        container=ContainerSpec(image="img:1"),
        health_gate=gate,
    )
    images: list[tuple] = []
    with pytest.raises(SpecError, match="gate said no"):
        job._job(info, req, said.append, print, True, lambda *a: images.append(a))
    return info, group, boxes, said, images


def test_a_failing_container_close_still_stops_the_lease_and_closes_the_connections(
    monkeypatch, tmp_path
):
    """Faked: the nodes, the containers (their close() raises). Real: _job's teardown."""

    def gate(info, group, **kw):
        raise SpecError("gate", "gate said no", "fix")

    _info, group, _boxes, said, _images = _container_job(monkeypatch, tmp_path, gate)
    print(said)
    assert any("not removed: RuntimeError: socket closed" in s for s in said)
    assert group.leases[-1] is None  # kept cluster: its lease removed after the failed close
    assert group.closed


def test_the_gate_gets_the_hosts_info_and_the_images_python_and_python_is_required(
    monkeypatch, tmp_path
):
    seen = {}

    def gate(info, group, **kw):
        seen.update(kw, python_of_info=info.python)
        raise SpecError("gate", "gate said no", "fix")

    info, _g, boxes, _said, images = _container_job(monkeypatch, tmp_path, gate)
    assert seen["python"] == "/opt/conda/bin/python3" and seen["python_of_info"] == info.python
    assert seen["wrap"]("node-0", "x") == "in-container x"
    assert boxes.needed == ["--launcher torchrun", "the health gate"]
    assert images == [("docker.io/library/img:1", {"node-0": "sha256:d"})]
