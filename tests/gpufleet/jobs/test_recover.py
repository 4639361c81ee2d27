"""jobs/recover.py: the recovery policy, the loss confirmation and the node-side commands."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.components.clusterspec import RecoverySpec
from gpufleet.core.errors import CannotReplace, JobFailed, NodeLost
from gpufleet.jobs import recover
from gpufleet.jobs.runs import RunRecord

NODES = ["node-0", "node-1", "node-2"]


def test_a_lost_node_is_replaced_alone():
    spec = RecoverySpec(max=2)
    end = recover.ending(NodeLost("node-1", "its SSH connection dropped"), {}, spec, 100.0)
    assert end is not None and (end.cause, end.nodes, end.lost_at) == ("lost", ["node-1"], 100.0)
    mode = recover.decide(end, spec, confirmed=True)
    assert (mode, recover.targets(mode, end, NODES)) == ("replace", ["node-1"])


def test_relaunch_replaces_every_node_and_a_node_that_answers_again_is_restarted():
    end = recover.ending(NodeLost("node-2", "no answer for 20 s"), {}, RecoverySpec(max=1), 5.0)
    assert end is not None
    relaunch = RecoverySpec(max=1, mode="relaunch")
    assert recover.targets(recover.decide(end, relaunch, True), end, NODES) == NODES
    for spec in (relaunch, RecoverySpec(max=1)):
        assert recover.decide(end, spec, confirmed=False) == "restart"


def test_a_rank_exit_recovers_only_when_opted_in_and_never_replaces():
    failed = JobFailed("node-0", 3, "rank 0")
    assert recover.ending(failed, {}, RecoverySpec(max=1), 0.0) is None
    spec = RecoverySpec(max=1, on_exit=[3])
    end = recover.ending(failed, {}, spec, 0.0)
    assert end is not None and end.cause == "exit"
    assert recover.decide(end, spec, confirmed=True) == "restart"
    assert not recover.needs_provider("restart")


def test_a_notice_wins_over_what_it_caused():
    notice = {"cloud": "aws", "kind": "instance-action", "noticed_at": 42.0, "not_before": None}
    end = recover.ending(JobFailed("node-0", 143), {"node-2": notice}, RecoverySpec(max=1), 99.0)
    assert end is not None
    assert (end.cause, end.nodes, end.lost_at) == ("preempted", ["node-2"], 42.0)
    assert "aws instance-action" in end.reason


def test_cannot_replace_is_refused_before_anything_is_created():
    info = ClusterInfo(
        name="c",
        cloud="ssh",
        instance_type="x",
        nodes=[NodeInfo(name="node-0", private_ip="10.0.0.1")],
        ssh_user="u",
        ssh_key_path="/k",
        known_hosts_path="/kh",
    )
    with pytest.raises(CannotReplace, match="node-0"):
        recover.check_replaces(info.name, info.cloud, "replace", ["node-0"], replaces=False)
    recover.check_replaces(
        info.name, info.cloud, "restart", ["node-0"], replaces=False
    )  # nothing to make


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def sleep(self, s: float) -> None:
        self.t += s

    def now(self) -> float:
        return self.t


def test_the_providers_view_confirms_at_once():
    clock = _Clock()
    ok, why = recover.confirm_lost(
        "node-1",
        lambda: {"node-1": "stopped"},
        lambda: pytest.fail("no probe needed"),
        sleep=clock.sleep,
        clock=clock.now,
    )
    assert ok and "stopped" in why and clock.t == 0


def test_a_slow_node_that_answers_within_the_window_is_not_lost():
    clock, tries = _Clock(), []

    def answers() -> bool:
        tries.append(clock.t)
        return clock.t >= 9  # SIGSTOPped for ~10 s, then answers

    ok, why = recover.confirm_lost(
        "node-1", lambda: {"node-1": "running"}, answers, sleep=clock.sleep, clock=clock.now
    )
    assert not ok and "answered again" in why and len(tries) == 4


def test_a_silent_node_is_lost_only_when_another_node_answers_meanwhile():
    """Provider view unavailable, or "running": silence alone may be this machine's own
    connection, so a loss needs another node answering (the client's path works)."""

    def broken() -> dict[str, str]:
        raise RuntimeError("the provider API is down")

    for status in (broken, lambda: {"node-1": "running"}):
        clock = _Clock()
        ok, why = recover.confirm_lost(
            "node-1",
            status,
            lambda: False,
            sleep=clock.sleep,
            clock=clock.now,
            others_answer=lambda: True,
        )
        assert ok and clock.t >= recover.CONFIRM_S and "another node answers" in why
        clock = _Clock()
        ok, why = recover.confirm_lost(
            "node-1",
            status,
            lambda: False,
            sleep=clock.sleep,
            clock=clock.now,
            others_answer=lambda: False,
        )
        assert not ok and "nothing is replaced" in why
    clock = _Clock()
    ok, why = recover.confirm_lost(
        "node-1",
        broken,
        lambda: False,
        sleep=clock.sleep,
        clock=clock.now,
        others_answer=lambda: True,
    )
    assert ok and "provider view unavailable" in why
    clock = _Clock()
    ok, _why = recover.confirm_lost(  # a single node: nobody to ask, never replaced on silence
        "node-0", broken, lambda: False, sleep=clock.sleep, clock=clock.now
    )
    assert not ok


def test_leftovers_command_finds_and_kills_only_this_runs_processes():
    """Real processes on this machine: one with the run's id, one with another id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    mine = subprocess.Popen(sleep, env={**env, "GPUFLEET_RUN_ID": "r-test-1"})
    other = subprocess.Popen(sleep, env={**env, "GPUFLEET_RUN_ID": "r-test-10"})
    try:
        found = subprocess.run(
            ["bash", "-c", recover.leftovers_command("r-test-1", kill=False)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert recover.parse_pids(found.stdout) == [mine.pid]
        after = subprocess.run(
            ["bash", "-c", recover.leftovers_command("r-test-1", kill=True)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert recover.parse_pids(after.stdout) == []
        assert mine.wait(timeout=5) == -9 and other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


def test_checkpoint_pack_and_unpack_round_trip(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "ckpt.pt").write_bytes(bytes(range(256)) * 10)
    out = subprocess.run(
        ["bash", "-c", recover.pack_command(str(src))], capture_output=True, text=True, check=True
    )
    data = recover.decode(out.stdout)
    subprocess.run(["bash", "-c", recover.unpack_command(str(dst))], input=data, check=True)
    assert (dst / "ckpt.pt").read_bytes() == (src / "ckpt.pt").read_bytes()
    none = subprocess.run(
        ["bash", "-c", recover.pack_command(str(tmp_path / "missing"))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert recover.decode(none.stdout) == b""


def test_record_keys_timeline_and_cost():
    r = recover.Recovery(1, "lost", "node-1 lost", "replace", ["node-1"], 100.0, 101.5, 110.0)
    r.synced_at, r.restarted_at = 112.0, 113.0
    assert list(r.as_dict()) == [
        "attempt",
        "cause",
        "reason",
        "mode",
        "nodes",
        "lost_at",
        "detected_at",
        "provisioned_at",
        "synced_at",
        "restarted_at",
    ]
    assert "detected 1.5s, provisioned 10.0s, synced 12.0s, restarted 13.0s" in recover.summary(r)
    rec = RunRecord("r", "c", "aws", 4, "torchrun", ["x"], started_at=0.0, usd_per_hour=4.0)
    rec.ended_at = 3600.0
    assert rec.cost_usd == 4.0
    rec.recoveries.append(r.as_dict())  # one of 4 nodes ($1/h) re-billed for 8.5 s
    assert rec.cost_usd == round(4.0 + 8.5 / 3600, 4)
    assert rec.restarts == 1


def test_run_refuses_a_replacing_recovery_on_ssh_hosts_before_anything_starts(monkeypatch):
    """check_recovery (run_job's check before anything starts) on an `ssh` cluster (recorded
    state faked) with --recover 1: CannotReplace; --recover-mode restart is allowed."""
    from pathlib import Path

    from gpufleet.jobs import run as job
    from gpufleet.jobs.launch import LaunchOptions
    from tests.gpufleet import fakes

    info = fakes.cluster(cloud="ssh", gpus=0)
    monkeypatch.setattr(job.state, "load", lambda name: info)
    monkeypatch.setattr(job.state, "load_spec", lambda name: None)
    opts = LaunchOptions(launcher="none", command=["true"], run_id="r1")

    def req(mode: str) -> job.JobRequest:
        rs = RecoverySpec(max=1, mode=mode)  # type: ignore[arg-type]
        return job.JobRequest(launch=opts, workdir=Path("."), cluster=info.name, recovery=rs)

    with pytest.raises(CannotReplace, match="cannot replace") as refused:
        job.check_recovery(req("replace"), info)
    assert "--recover-mode restart" in (refused.value.hint or "")
    job.check_recovery(req("restart"), info)


def test_checkpoint_copy_fails_whole_and_replaces_whole(tmp_path):
    """Real tar/bash: an unreadable folder fails the pack (no partial archive); a bad
    archive leaves the node's folder as it was; a good one replaces it (no stale files)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "ckpt.pt").write_bytes(b"step 40")
    dst.mkdir()
    (dst / "old.pt").write_bytes(b"step 10")
    bad = subprocess.run(["bash", "-c", recover.unpack_command(str(dst))], input=b"not a tar")
    assert bad.returncode != 0 and (dst / "old.pt").read_bytes() == b"step 10"
    assert [p.name for p in tmp_path.iterdir() if ".in." in p.name] == []
    out = subprocess.run(
        ["bash", "-c", recover.pack_command(str(src))], capture_output=True, text=True, check=True
    )
    subprocess.run(
        ["bash", "-c", recover.unpack_command(str(dst) + "/")],
        input=recover.decode(out.stdout),
        check=True,
    )
    assert sorted(p.name for p in dst.iterdir()) == ["ckpt.pt"]
    if os.geteuid() != 0:
        (src / "secret").write_bytes(b"x")
        (src / "secret").chmod(0)
        try:
            failed = subprocess.run(
                ["bash", "-c", recover.pack_command(str(src))], capture_output=True, text=True
            )
            assert failed.returncode != 0 and failed.stdout == ""
        finally:
            (src / "secret").chmod(0o600)
