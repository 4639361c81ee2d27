"""run's recovery loop (_job, _recover, _Attempts.connect/stop_old_ranks) on fakes.

Faked: the nodes (a Group whose commands answer as each test says), the provisioner
(status, replace), the attempts themselves (_Attempts.run raises what an ended attempt
raises). Real: the loop's order of work, its records, its errors and exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.components.clusterspec import RecoverySpec
from gpufleet.core.errors import HostResult, JobFailed, NodeLost
from gpufleet.jobs import recover
from gpufleet.jobs import run as job
from gpufleet.jobs.launch import LaunchOptions
from gpufleet.provision import LEASE
from tests.gpufleet import fakes


class FakeGroup:
    """A Group: `answer(node) -> HostResult` for every command; `silent` nodes give none."""

    made: list[FakeGroup] = []

    def __init__(self, info, nodes=None, **kw):
        self.info = info
        self.nodes = [n for n in info.nodes if nodes is None or n.name in nodes]
        self.lost: dict[str, str] = {}
        self.may_write = {LEASE}
        self.commands: list[str] = []
        self.leases: list = []
        self.closed = self.cancelled = False
        self.silent: set[str] = set()
        FakeGroup.made.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def subset(self, nodes):
        sub = FakeGroup(self.info, nodes)
        sub.silent, sub.commands, sub.leases = self.silent, self.commands, self.leases
        return sub

    def run(self, command, **kw):
        self.commands.append(command)
        out = {}
        for n in self.nodes:
            if n.name in self.silent:
                out[n.name] = HostResult(n.name, None, error="timed out")
            else:
                out[n.name] = HostResult(n.name, 0)
        return out

    def cancel(self):
        self.cancelled = True

    def write_lease(self, seconds):
        self.leases.append((sorted(n.name for n in self.nodes), seconds))
        return {n.name: None for n in self.nodes}

    def close(self):
        self.closed = True


class FakeProvisioner:
    def __init__(self, status="terminated", fail=None):
        self.state, self.fail, self.replaced = status, fail, []

    def status(self, info):
        return {n.name: self.state for n in info.nodes}

    def replace(self, info, nodes, progress):
        if self.fail:
            raise self.fail
        self.replaced.append(list(nodes))
        return info.model_copy()


def _loop(monkeypatch, tmp_path, endings, prov, spec=RecoverySpec(max=2)):
    """_job with _Attempts.run ending as `endings` says (an exception, or 0)."""
    from gpufleet.core import signals

    monkeypatch.setattr(signals._shielded, "on", False, raising=False)
    monkeypatch.setattr(job, "Group", FakeGroup)
    monkeypatch.setattr("gpufleet.provision.for_cloud", lambda cloud, **kw: prov)
    info = fakes.cluster(n=3, cloud="local")
    calls = []

    def run(self, info, restart=0, rec=None):
        calls.append((restart, rec.reason if rec else None))
        self.group = FakeGroup(info)
        self.info = info
        step = endings.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    monkeypatch.setattr(job._Attempts, "run", run)
    req = job.JobRequest(
        launch=LaunchOptions(launcher="none", command=["x"], run_id="r1"),
        workdir=Path(tmp_path),
        cluster="t",
        recovery=spec,
    )
    records, said = [], []
    try:
        code = job._job(info, req, said.append, print, True, None, records.append)
    finally:
        monkeypatch.setattr(signals._shielded, "on", False, raising=False)
    return code, records, calls, said


def _lost(*nodes):
    why = "its SSH connection dropped"
    return NodeLost(nodes[0], why, whys=dict.fromkeys(nodes, why), at=100.0)


def test_every_lost_node_is_replaced_in_one_recovery(monkeypatch, tmp_path):
    prov = FakeProvisioner()
    code, records, calls, _ = _loop(monkeypatch, tmp_path, [_lost("node-1", "node-2"), 0], prov)
    assert code == 0 and prov.replaced == [["node-1", "node-2"]]
    assert len(records) == 1 and records[0]["nodes"] == ["node-1", "node-2"]
    assert records[0]["provisioned_at"] is not None and records[0]["mode"] == "replace"
    assert "node-1 lost" in records[0]["reason"] and "node-2 lost" in records[0]["reason"]
    assert [c[0] for c in calls] == [0, 1]


def test_a_failed_replace_is_recorded_and_ends_the_run_as_a_loss(monkeypatch, tmp_path):
    """replace raises: the recovery is recorded once (the steps that did not happen null),
    and the run ends as the loss would have (exit 5), saying why."""
    got: list[dict] = []
    prov = FakeProvisioner(fail=RuntimeError("quota exceeded"))
    with pytest.raises(recover.RecoveryFailed, match="quota exceeded") as failed:
        _record_into(monkeypatch, tmp_path, prov, got)
    assert failed.value.exit_code == NodeLost("n", "w").exit_code == 5
    assert len(got) == 1 and "quota exceeded" in got[0]["reason"]
    assert got[0]["provisioned_at"] is None and got[0]["restarted_at"] is None
    assert got[0]["detected_at"] is not None and got[0]["nodes"] == ["node-1"]


def _record_into(monkeypatch, tmp_path, prov, got):
    from gpufleet.core import signals

    monkeypatch.setattr(signals._shielded, "on", False, raising=False)
    monkeypatch.setattr(job, "Group", FakeGroup)
    monkeypatch.setattr("gpufleet.provision.for_cloud", lambda cloud, **kw: prov)
    info = fakes.cluster(n=3, cloud="local")

    def run(self, info, restart=0, rec=None):
        self.group = FakeGroup(info)
        raise _lost("node-1")

    monkeypatch.setattr(job._Attempts, "run", run)
    req = job.JobRequest(
        launch=LaunchOptions(launcher="none", command=["x"], run_id="r1"),
        workdir=Path(tmp_path),
        cluster="t",
        recovery=RecoverySpec(max=2),
    )
    try:
        job._job(info, req, lambda m: None, print, True, None, got.append)
    finally:
        monkeypatch.setattr(signals._shielded, "on", False, raising=False)


def test_a_restart_provisions_nothing_and_says_so(monkeypatch, tmp_path):
    spec = RecoverySpec(max=1, on_exit=[75])
    prov = FakeProvisioner()
    code, records, calls, _ = _loop(monkeypatch, tmp_path, [JobFailed("node-0", 75), 0], prov, spec)
    assert code == 0 and prov.replaced == []
    assert records[0]["mode"] == "restart" and records[0]["provisioned_at"] is None


def test_silence_while_no_other_node_answers_replaces_nothing(monkeypatch, tmp_path):
    """The provider says running, and no node answers this machine (its own network):
    restart on the same nodes, not a replacement of a healthy node."""
    monkeypatch.setattr(recover, "CONFIRM_S", 0.0)
    monkeypatch.setattr(
        recover,
        "confirm_lost",
        lambda node, st, answers, others_answer=None, **kw: (
            (True, "x") if others_answer and others_answer() else (False, "nothing is replaced")
        ),
    )

    class Dead(FakeGroup):
        def run(self, command, **kw):
            return {n.name: HostResult(n.name, None, error="no route") for n in self.nodes}

    prov = FakeProvisioner(status="running")
    monkeypatch.setattr(job, "Group", Dead)
    info = fakes.cluster(n=2, cloud="local")
    got = job._confirm(info, prov, ["node-1"], lambda m: None)
    assert got == {"node-1": (False, "nothing is replaced")}
    monkeypatch.setattr(job, "Group", FakeGroup)  # node-0 answers: the loss is real
    assert job._confirm(info, prov, ["node-1"], lambda m: None)["node-1"][0]


def test_a_survivor_that_does_not_answer_the_leftover_check_is_not_clean(monkeypatch, tmp_path):
    info = fakes.cluster(n=3, cloud="local")
    req = job.JobRequest(
        launch=LaunchOptions(launcher="none", command=["x"], run_id="r1"),
        workdir=Path(tmp_path),
        cluster="t",
    )
    att = job._Attempts(req, lambda m: None, print, True, None)
    att.group = FakeGroup(info)
    att.group.silent.add("node-2")
    with pytest.raises(recover.LeftoverRanks, match="node-2: no answer"):
        att.stop_old_ranks(["node-0", "node-2"], "r1")
    att.group.silent.clear()
    att.stop_old_ranks(["node-0", "node-2"], "r1")


def test_a_restart_gets_a_fresh_group_and_the_lease_moves_before_the_old_one_closes(
    monkeypatch, tmp_path
):
    """After a recovery, connect() makes a new Group (the old one's `lost` marks every
    command on that node as lost) and waits for every node; the lease keeper renews
    through the new group before the old one closes; a replaced node of a cluster this run
    did not create has its boot lease removed."""
    FakeGroup.made = []
    monkeypatch.setattr(job, "Group", FakeGroup)
    waited = []
    monkeypatch.setattr(job.lifecycle, "wait_ready", lambda g, *a, **k: waited.append(g))
    info = fakes.cluster(n=2, cloud="local")
    req = job.JobRequest(
        launch=LaunchOptions(launcher="none", command=["x"], run_id="r1"),
        workdir=Path(tmp_path),
        cluster="t",
    )
    att = job._Attempts(req, lambda m: None, print, True, None)
    first = att.connect(info)
    assert att.lease is not None
    att.lease.stop()
    first.lost["node-1"] = "no answer for 20 s"
    assert att.connect(info) is first  # same attempt: same group
    seen_by_lease = []
    orig = job._LeaseKeeper.renew

    def renew(self):
        seen_by_lease.append((self.group, first.closed))
        orig(self)

    monkeypatch.setattr(job._LeaseKeeper, "renew", renew)
    second = att.connect(info, fresh=True)
    assert second is not first and second.lost == {} and waited == [first, second]
    assert first.closed and seen_by_lease == [(second, False)]
    # not created by this run: the replaced node's lease dropped, nothing renewed
    other = job._Attempts(req, lambda m: None, print, False, None)
    other.unleased = {"node-1"}
    g = other.connect(info, fresh=True)
    assert g.leases == [(["node-1"], None)] and other.lease is None


def test_lost_at_is_when_the_node_fell_silent(monkeypatch):
    """The group records when a silent node last answered (not when the client gave up on
    it); a dropped one, when it dropped. The run's NodeLost carries both lost nodes."""
    import threading
    from types import SimpleNamespace

    from gpufleet.remote.group import Group

    g = SimpleNamespace(lost={}, lost_at={}, _lock=threading.Lock())
    monkeypatch.setattr(job.time, "time", lambda: 130.0)
    assert Group._mark_lost(g, "node-1", "no answer for 20 s", 110.0) == "no answer for 20 s"
    Group._mark_lost(g, "node-1", "its SSH connection dropped", 130.0)  # the first word stays
    Group._mark_lost(g, "node-2", "its SSH connection dropped", 125.0)
    results = {
        n: HostResult(n, None, error=f"lost: {g.lost[n]}", finished=130.0 + i)
        for i, n in enumerate(["node-1", "node-2"])
    }
    info = fakes.cluster(n=3, cloud="local")
    with pytest.raises(NodeLost) as lost:
        job._loss(info, g, results, 0.0)
    assert lost.value.at == 110.0 and lost.value.nodes == ["node-1", "node-2"]
    assert lost.value.whys["node-1"] == "no answer for 20 s"


def test_a_notice_an_earlier_recovery_handled_is_not_seen_again():
    notice = {"cloud": "aws", "kind": "instance-action", "noticed_at": 42.0}
    handled = {recover.notice_key("node-1", notice)}
    assert recover.fresh({"node-1": notice}, handled) == {}
    newer = dict(notice, noticed_at=99.0)
    assert recover.fresh({"node-1": newer}, handled) == {"node-1": newer}


def test_ctrl_c_during_a_replace_is_recorded_and_keeps_its_exit_code(monkeypatch, tmp_path):
    import signal

    from gpufleet.core.signals import Interrupted

    got: list[dict] = []
    prov = FakeProvisioner(fail=Interrupted(signal.SIGINT))
    with pytest.raises(Interrupted) as stopped:
        _record_into(monkeypatch, tmp_path, prov, got)
    assert stopped.value.exit_code == 130
    assert len(got) == 1 and got[0]["provisioned_at"] is None and got[0]["cause"] == "lost"


def test_replace_is_refused_before_start_on_an_attached_cluster(monkeypatch):
    """An existing cluster with no recorded spec (attached): replace/relaunch refused at
    once, restart allowed (faked: the state files)."""
    from gpufleet.core.errors import SpecError

    info = fakes.cluster(n=2, cloud="aws")
    monkeypatch.setattr(job.state, "load_spec", lambda name: None)

    def req(mode):
        return job.JobRequest(
            launch=LaunchOptions(launcher="none", command=["x"], run_id="r1"),
            workdir=Path("."),
            cluster="t",
            recovery=RecoverySpec(max=1, mode=mode),
        )

    with pytest.raises(SpecError, match="none recorded|has none"):
        job.check_recovery(req("replace"), info)
    job.check_recovery(req("restart"), info)


def test_relaunch_without_a_lasting_checkpoint_folder_is_warned_about(monkeypatch, tmp_path):
    spec = RecoverySpec(max=1, mode="relaunch")
    _code, _r, _c, said = _loop(monkeypatch, tmp_path, [0], FakeProvisioner(), spec)
    assert any("replaces the head too" in s for s in said)
    spec = RecoverySpec(max=1, mode="relaunch", checkpoint_dir="s3://b/ck")
    _code, _r, _c, said = _loop(monkeypatch, tmp_path, [0], FakeProvisioner(), spec)
    assert not any("replaces the head too" in s for s in said)


def test_only_a_workdir_checkpoint_folder_is_copied_between_nodes():
    """A URL or an absolute path (a shared filesystem) is the job's own; the default and a
    relative folder are packed on the head (faked nodes: commands recorded, nothing found)."""
    info = fakes.cluster(n=2, cloud="local")
    for ckpt, copied in ((None, True), ("ck", True), ("/shared/ck", False), ("s3://b/k", False)):
        g = FakeGroup(info)
        opts = LaunchOptions(launcher="none", command=["x"], run_id="r1", checkpoint_dir=ckpt)
        job._copy_checkpoints(info, g, opts, lambda m: None)
        assert bool(g.commands) is copied, ckpt
