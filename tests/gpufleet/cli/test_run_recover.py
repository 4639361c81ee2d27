"""run --recover, --recover-mode, --recover-on-exit, --checkpoint-dir, --elastic, --max-restarts:
flags to RecoverySpec / LaunchOptions, refusals before anything exists, --dry-run, --json and
`runs` (the restarts column, one run's recovery timeline).

Real: the CLI (gpufleet.cli.main, in-process: `error:`/`fix:` and the exit code are the user's),
RecoverySpec/ClusterSpec validation, the provider traits, the state folder, the JSON schemas,
RunRecord and its file. Faked: the job itself (`run_job`, `JobRequest`: nothing runs) and the
provisioner (nothing is booted); the recoveries in the records are written here, in the keys
the recovery loop records (interface 1), not made by a real loss.
"""

from __future__ import annotations

import json
import time
import types

import pytest

from gpufleet.cli import main
from gpufleet.components.clusterspec import RecoverySpec
from tests.gpufleet.cli.test_run_image import check, nothing_created, run_args, schema_validator


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def job(monkeypatch):
    """run_job and JobRequest captured: what `run` asked for; nothing runs, nothing is made."""
    import gpufleet.jobs.run as jobrun

    seen: dict = {}

    def request(**kwargs):
        seen["request"] = kwargs
        return types.SimpleNamespace(**kwargs)

    def run_job(req, progress, printer, on_end):
        seen["on_end"] = on_end
        return 0

    def no_provisioner(*a, **k):
        raise AssertionError("a provisioner was asked for")

    monkeypatch.setattr(jobrun, "JobRequest", request)
    monkeypatch.setattr(jobrun, "run_job", run_job)
    monkeypatch.setattr("gpufleet.provision.for_cloud", no_provisioner)
    monkeypatch.setattr("gpufleet.clusters.ops.for_cloud", no_provisioner)
    return seen


def test_recover_flags_reach_the_request_and_the_created_spec(capsys, job):
    code, _, err = cli(
        capsys,
        *run_args("--cloud", "vm", "--recover", "3", "--recover-mode", "relaunch",
                  "--recover-on-exit", "137", "--recover-on-exit", "75",
                  "--checkpoint-dir", "s3://bucket/ckpt"),
    )  # fmt: skip
    assert code == 0, err
    req = job["request"]
    want = RecoverySpec(
        max=3, mode="relaunch", on_exit=[75, 137], checkpoint_dir="s3://bucket/ckpt"
    )
    assert req["recovery"] == want
    assert req["spec"].recovery == want  # recorded with the cluster
    assert req["launch"].checkpoint_dir == "s3://bucket/ckpt"
    assert (req["launch"].elastic, req["launch"].max_restarts) == (None, 0)


def test_recover_alone_replaces_and_without_it_the_cluster_decides(capsys, job):
    code, _, err = cli(capsys, *run_args("--recover", "2"))
    assert code == 0, err
    assert job["request"]["recovery"] == RecoverySpec(max=2, mode="replace")
    code, _, err = cli(capsys, *run_args("--checkpoint-dir", "/scratch/ckpt"))
    assert code == 0, err
    req = job["request"]
    # None: the recovery loop takes the cluster's recorded spec.recovery (interface 1)
    assert req["recovery"] is None and req["spec"].recovery is None
    assert req["launch"].checkpoint_dir == "/scratch/ckpt"


def test_a_cluster_runs_recovery_flags_and_its_node_count_for_elastic(capsys, job):
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    state.save(cluster(cloud="vm", n=3))
    code, _, err = cli(
        capsys, *run_args("--cluster", "t", "--recover", "1", "--elastic", "2:3",
                          "--max-restarts", "2"),
    )  # fmt: skip
    assert code == 0, err
    req = job["request"]
    assert req["recovery"] == RecoverySpec(max=1) and req["spec"] is None
    assert (req["launch"].elastic, req["launch"].max_restarts) == ("2:3", 2)
    code, _, err = cli(capsys, *run_args("--cluster", "t", "--elastic", "2:4"))
    assert code == 2
    assert "error: --elastic: 2:4 asks for more nodes than the cluster's 3" in err


def test_a_kept_clusters_recorded_checkpoint_dir_is_the_runs_without_flags(capsys, job):
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    state.save(cluster(cloud="vm"))
    recorded = {"max": 2, "checkpoint_dir": "s3://team/ckpt"}
    state.save_spec(ClusterSpec.from_input({"name": "t", "cloud": "vm", "recovery": recorded}))
    code, _, err = cli(capsys, *run_args("--cluster", "t"))
    assert code == 0, err
    req = job["request"]
    # the recovery itself is the loop's to read from the record (None here); the folder is
    # the ranks' environment, so it is set on the launch
    assert req["recovery"] is None and req["launch"].checkpoint_dir == "s3://team/ckpt"
    code, _, err = cli(capsys, *run_args("--cluster", "t", "--checkpoint-dir", "/scratch/x"))
    assert code == 0 and job["request"]["launch"].checkpoint_dir == "/scratch/x"
    code, _, err = cli(capsys, *run_args("--cluster", "t", "--recover", "1"))
    assert code == 0 and job["request"]["launch"].checkpoint_dir is None  # this run's own


SSH = ("--cloud", "ssh", "--hosts", "10.0.0.1,10.0.0.2")
BAD = [
    (["--recover-mode", "restart"], "--recover-mode: applies to --recover only"),
    (["--recover-on-exit", "1"], "--recover-on-exit: applies to --recover only"),
    (["--recover", "-1"], "--recover: -1 is not a number of recoveries"),
    (["--recover", "101"], "--recover: 101 is out of range"),
    (["--recover", "1", "--recover-mode", "again"],
     "--recover-mode: 'again' is not one of replace, relaunch, restart, none"),
    (["--recover", "1", "--recover-on-exit", "0"],
     "--recover-on-exit: 0 is not a failing exit code"),
    (["--recover", "1", "--recover-on-exit", "300"],
     "--recover-on-exit: 300 is not a failing exit code"),
    ([*SSH, "--recover", "1"],
     "--recover-mode: replace needs new machines, and --cloud ssh cannot make one: the hosts "
     "are yours (replace is the default)"),
    ([*SSH, "--recover", "1", "--recover-mode", "relaunch"],
     "--recover-mode: relaunch needs new machines, and --cloud ssh cannot make one"),
    (["--elastic", "2:4", "--launcher", "none"],
     "--elastic: is torchrun's, and this run's launcher is none"),
    (["--max-restarts", "1", "--launcher", "mpirun"],
     "--max-restarts: is torchrun's, and this run's launcher is mpirun"),
    (["--elastic", "4:2"], "--elastic: '4:2' is not MIN:MAX nodes"),
    (["--elastic", "two"], "--elastic: 'two' is not MIN:MAX nodes"),
    (["--elastic", "0:2"], "--elastic: '0:2' is not MIN:MAX nodes"),
    (["--elastic", "1:3"], "--elastic: 1:3 asks for more nodes than the cluster's 2"),
    (["--max-restarts", "-1"], "--max-restarts: -1 is below 0"),
    (["--checkpoint-dir", ""], "--checkpoint-dir: '' is no folder"),
    (["--checkpoint-dir", "../elsewhere"], "--checkpoint-dir: '../elsewhere' leaves the folder"),
    (["--checkpoint-dir", "S3://Bucket"], "--checkpoint-dir: 'S3://Bucket' is not a URL"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_input_names_the_flag_before_anything_exists(
    capsys, job, gpufleet_home, flags, message
):
    code, _, err = cli(capsys, *run_args(*flags))
    assert code == 2, err
    assert f"error: {message}" in err and "  fix: " in err, err
    assert "request" not in job and nothing_created(gpufleet_home)


def test_ssh_hosts_may_restart_or_give_up(capsys, job):
    for mode in ("restart", "none"):
        code, _, err = cli(capsys, *run_args(*SSH, "--recover", "2", "--recover-mode", mode))
        assert code == 0, err
        assert job["request"]["recovery"] == RecoverySpec(max=2, mode=mode)


def test_dry_run_says_the_recovery_and_the_json_keeps_the_schema(capsys, job, gpufleet_home):
    flags = ("--cloud", "vm", "--recover", "2", "--recover-on-exit", "137",
             "--elastic", "1:2", "--dry-run")  # fmt: skip
    code, out, err = cli(capsys, *run_args(*flags))
    assert code == 0, err
    assert "  recovery   replace, at most 2; also on exit 137\n" in out
    assert "  elastic    torchrun --nnodes 1:2\n" in out
    code, out, _ = cli(capsys, *run_args(*flags, "--json"))
    doc = check("dry-run", out)
    assert doc["recovery"] == "replace, at most 2; also on exit 137"
    assert "request" not in job and nothing_created(gpufleet_home)


T0 = 1_700_000_000.0
RECOVERY = {
    "attempt": 1, "cause": "lost", "reason": "node-1 lost: its provider says gone",
    "mode": "replace", "nodes": ["node-1"], "lost_at": T0, "detected_at": T0 + 1.5,
    "provisioned_at": T0 + 31.5, "synced_at": T0 + 33.0, "restarted_at": T0 + 35.0,
}  # fmt: skip
PREEMPTED = {
    **RECOVERY, "attempt": 2, "cause": "preempted", "reason": "aws: instance-action terminate",
    "lost_at": None, "detected_at": T0 + 100, "provisioned_at": T0 + 140,
    "synced_at": None, "restarted_at": T0 + 145,
}  # fmt: skip


def saved(recoveries: list[dict], run_id: str = "r1"):
    from gpufleet.jobs import runs

    rec = runs.RunRecord(id=run_id, cluster="big", cloud="aws", nodes=2, launcher="torchrun",
                         command=["train_resume.py"], started_at=time.time() - 600,
                         ended_at=time.time(), exit_code=0, status="succeeded",
                         usd_per_hour=60.0, recoveries=recoveries)  # fmt: skip
    runs._save(rec)
    return rec


def test_json_result_and_list_carry_the_recoveries(capsys, job, gpufleet_home):
    code, _, err = cli(capsys, *run_args("--cloud", "vm", "--recover", "2", "--json"))
    assert code == 0, err
    job["on_end"](saved([RECOVERY, PREEMPTED]))
    doc = check("run", capsys.readouterr().out)
    assert doc["recoveries"] == [RECOVERY, PREEMPTED]
    code, out, _ = cli(capsys, "runs", "--json")
    assert code == 0
    listed = check("run-list", out)["runs"]
    assert [r["recoveries"] for r in listed] == [[RECOVERY, PREEMPTED]]


def test_the_schema_refuses_a_recovery_outside_the_agreed_keys():
    from gpufleet.cli import documents

    rec = saved([])
    for bad in ({**RECOVERY, "cause": "slow"}, {**RECOVERY, "extra": 1},
                {k: v for k, v in RECOVERY.items() if k != "synced_at"}):  # fmt: skip
        rec.recoveries = [bad]
        assert list(schema_validator("run-list").iter_errors(documents.run_list([rec]))), bad
    rec.recoveries = [RECOVERY]
    assert not list(schema_validator("run-list").iter_errors(documents.run_list([rec])))


def test_runs_shows_the_restarts_and_one_runs_timeline(capsys, gpufleet_home):
    saved([RECOVERY, PREEMPTED])
    saved([], run_id="r2")
    code, out, _ = cli(capsys, "runs")
    assert code == 0
    lines = out.splitlines()
    header = next(ln for ln in lines if "STATUS" in ln).split()
    assert header[-2:] == ["RESTARTS", "COST"]
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.strip()[:2] in ("r1", "r2")}
    assert rows["r1"][-2] == "2" and rows["r2"][-2] == "0"
    code, out, _ = cli(capsys, "runs", "r1")
    assert code == 0
    assert "r2" not in out
    assert "2 recoveries:" in out
    assert (
        "#1 lost (node-1 lost: its provider says gone): replace node-1; detect +1.5s, "
        "provision +30.0s, sync +1.5s, restart +2.0s, 35.0s in all" in out
    )
    # no loss time (a notice): the first step has no start; a step that did not happen is "-"
    assert (
        "#2 preempted (aws: instance-action terminate): replace node-1; detect -, "
        "provision +40.0s, sync -, restart +5.0s, 45.0s in all" in out
    )
    code, out, _ = cli(capsys, "runs", "r2")
    assert "no recoveries" in out
    code, out, _ = cli(capsys, "runs", "r1", "--json")
    assert [r["id"] for r in json.loads(out)["runs"]] == ["r1"]
    code, _, err = cli(capsys, "runs", "nope")
    assert code == 2 and "no run 'nope'" in err


def test_recover_modes_are_the_specs_and_the_completions():
    import typing

    from gpufleet.cli import completers
    from gpufleet.components.clusterspec import RECOVERY_MODES

    literal = typing.get_args(RecoverySpec.model_fields["mode"].annotation)
    assert RECOVERY_MODES == literal == tuple(completers.RECOVER_MODES)


def test_any_recovery_flag_text_is_taken_or_refused_with_a_named_flag():
    """Property (hypothesis): whatever text --elastic, --checkpoint-dir, --recover-mode and
    --recover-on-exit get, the checks return a value or raise SpecError naming one of them."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from gpufleet.cli import recovery as rcv
    from gpufleet.components.errors import SpecError

    flags = {"--elastic", "--max-restarts", "--checkpoint-dir", "--recover", "--recover-mode",
             "--recover-on-exit"}  # fmt: skip

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(
        elastic=st.one_of(st.none(), st.text(max_size=12), st.from_regex(r"\A\d{1,5}:\d{1,5}\Z")),
        restarts=st.one_of(st.none(), st.integers(-5, 10**6)),
        nodes=st.integers(1, 64),
        ckpt=st.one_of(st.none(), st.text(max_size=30), st.just("s3://b/x"), st.just("/abs")),
        recover=st.one_of(st.none(), st.integers(-3, 10**9)),
        mode=st.one_of(st.none(), st.text(max_size=10), st.sampled_from(["replace", "none"])),
        on_exit=st.lists(st.integers(-300, 300), max_size=3),
        cloud=st.sampled_from(["local", "vm", "ssh", "aws"]),
    )
    def check_one(elastic, restarts, nodes, ckpt, recover, mode, on_exit, cloud):
        try:
            got, n = rcv.elastic(elastic, restarts, "torchrun", nodes)
            assert n >= 0
            if got is not None:
                low, high = map(int, got.split(":"))
                assert 1 <= low <= high <= nodes
            path = rcv.checkpoint_dir(ckpt)
            spec = rcv.spec(recover, mode, on_exit, path, cloud)
            assert spec is None or (spec.max == recover and spec.checkpoint_dir == path)
        except SpecError as e:
            assert e.field in flags, e

    check_one()
