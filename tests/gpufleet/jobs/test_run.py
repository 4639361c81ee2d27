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
