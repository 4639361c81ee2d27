"""Every command against the one exit-code table: bad input, an unknown and an expired cluster."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from gpufleet.cli import build_command, main
from gpufleet.components.exitcodes import ExitCode, help_text, markdown
from gpufleet.core import state
from tests.gpufleet.fakes import cluster
from tests.integration.conftest import ROOT

USAGE, OK = ExitCode.USAGE, ExitCode.OK
EX = str(ROOT / "examples")
RUN = ["run", "--workdir", EX]

# command -> [(argv, exit code, what stderr says)]: every command has a bad-input case, and
# every command that names a cluster an unknown ("nope") and an expired ("old") one.
# "t" is a recorded 2-node cluster (no node runs: each case fails before connecting).
CASES: dict[str, list[tuple[list[str], ExitCode, str]]] = {
    "attach": [
        (["attach", "t", "--outputs", "o.json", "--stack", "x"], USAGE, "reads no stack"),
        (["attach", "p5", "--outputs", "/nonexistent/o.json"], USAGE, "cannot read"),
    ],
    "catalog": [
        (["catalog", "--gpu", "Z999"], USAGE, "gpu: no instance type has a GPU matching 'Z999'"),
        (["catalog", "--cloud", "ibm"], USAGE, "'ibm' has no catalog"),
    ],
    "completion": [(["completion", "tcsh"], USAGE, "bash, zsh, fish")],
    "down": [
        (["down"], USAGE, "name a cluster"),
        (["down", "nope"], USAGE, "no cluster named nope"),
        (["down", "old"], OK, "already gone (it expired at"),
    ],
    "exec": [
        (["exec", "t", "--node", "node-9", "--", "true"], USAGE, "has no node 'node-9'"),
        (["exec", "nope", "--", "true"], USAGE, "no cluster named 'nope'"),
        (["exec", "old", "--", "true"], USAGE, "cluster 'old' expired at"),
    ],
    "extend": [
        (["extend", "t", "0"], USAGE, "give a duration above 0"),
        (["extend", "nope", "2h"], USAGE, "no cluster named 'nope'"),
        (["extend", "old", "2h"], USAGE, "cluster 'old' expired at"),
    ],
    "health": [
        (["health", "t", "--fabric", "--sizes", "abc"], USAGE, "sizes: 'abc'"),
        (["health", "nope"], USAGE, "no cluster named 'nope'"),
        (["health", "old"], USAGE, "cluster 'old' expired at"),
    ],
    "hostfile": [
        (["hostfile", "t", "--format", "xml"], USAGE, "xml"),
        (["hostfile", "nope"], USAGE, "no cluster named 'nope'"),
        (["hostfile", "old"], USAGE, "cluster 'old' expired at"),
    ],
    "image bake": [(["image", "bake", "--stack", "nope"], USAGE, "nope")],
    "image render": [(["image", "render", "--stack", "gcp-a3", "--node", "5"], USAGE, "0..1")],
    "list": [(["list", "--bogus"], USAGE, "No such option")],
    "logs": [(["logs", "nope"], USAGE, "no run 'nope'")],
    "plan": [(["plan", "--stack", "nope"], USAGE, "nope")],
    "run": [
        ([*RUN, "--nodes", "0", "--", "train_ddp.py"], USAGE, "nodes: must be at least 1, got 0"),
        ([*RUN, "--cluster", "nope", "--", "train_ddp.py"], USAGE, "no cluster named 'nope'"),
        ([*RUN, "--cluster", "old", "--", "train_ddp.py"], USAGE, "cluster 'old' expired at"),
        (
            [
                *RUN,
                "--cloud",
                "azure",
                "-t",
                "Standard_ND96asr_v4",
                "--spot",
                "--dry-run",
                "--",
                "train_ddp.py",
            ],
            USAGE,
            "spot: Standard_ND96asr_v4 nodes need one availability set",
        ),
    ],  # fmt: skip
    "runs": [(["runs", "--bogus"], USAGE, "No such option")],
    "setup pulumi": [(["setup", "pulumi", "--bogus"], USAGE, "No such option")],
    "ssh": [
        (["ssh", "t", "node-7"], USAGE, "has no node 'node-7'"),
        (["ssh", "nope"], USAGE, "no cluster named 'nope'"),
        (["ssh", "old"], USAGE, "cluster 'old' expired at"),
    ],
    "ssh-config": [
        (["ssh-config"], USAGE, "name a cluster"),
        (["ssh-config", "nope"], USAGE, "no cluster named 'nope'"),
        (["ssh-config", "old"], USAGE, "cluster 'old' expired at"),
    ],
    "status": [
        (["status", "--bogus", "t"], USAGE, "No such option"),
        (["status", "nope"], USAGE, "no cluster named 'nope'"),
        (["status", "old"], USAGE, "cluster 'old' expired at"),
    ],
    "sweep": [(["sweep", "--bogus"], USAGE, "No such option")],
    "sync": [
        (["sync", "t", "--sync-method", "ftp"], USAGE, "use auto, rsync or paramiko"),
        (["sync", "nope"], USAGE, "no cluster named 'nope'"),
        (["sync", "old"], USAGE, "cluster 'old' expired at"),
    ],
    "up": [
        (["up", "--nodes", "0"], USAGE, "nodes: must be at least 1, got 0"),
        (["up", "--cloud", "aws", "--nodes", "0", "--dry-run"], USAGE, "must be at least 1"),
        (["up", "--nodes", "-1"], USAGE, "nodes: must be at least 1, got -1"),
        (
            ["up", "--cloud", "azure", "-t", "Standard_ND96asr_v4", "--spot", "--dry-run"],
            USAGE,
            "spot: Standard_ND96asr_v4 nodes need one availability set",
        ),
    ],
}
EXPIRED_AT = time.mktime((2026, 1, 2, 3, 4, 0, 0, 0, -1))


def commands(cmd=None, prefix: tuple[str, ...] = ()) -> list[str]:
    """Every leaf command of the CLI, as `image bake`."""
    out = []
    for name, sub in sorted(getattr(cmd or build_command(), "commands", {}).items()):
        if getattr(sub, "commands", None):
            out += commands(sub, (*prefix, name))
        else:
            out.append(" ".join((*prefix, name)))
    return out


def test_every_command_has_cases():
    assert sorted(CASES) == commands()


@pytest.fixture
def recorded(gpufleet_home, monkeypatch):
    """Cluster "t" recorded (never started), "old" expired and removed, and signals restored."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    monkeypatch.setenv("GPUFLEET_HOLDER", "0")
    state.save(cluster(cloud="local"))
    state.forget("old", expired=EXPIRED_AT)
    yield
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize(
    ("argv", "code", "said"),
    [case for cases in CASES.values() for case in cases],
    ids=[" ".join(c[0])[:60] for cases in CASES.values() for c in cases],
)
def test_command_exits_with_its_code(recorded, capsys, argv, code, said):
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, err
    assert said in err, err
    assert "Traceback" not in err


def test_an_expired_cluster_says_when(recorded, capsys):
    assert main(["status", "old"]) == USAGE
    err = capsys.readouterr().err
    shown = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(EXPIRED_AT))
    assert f"cluster 'old' expired at {shown}" in err and "fix: create it again" in err
    state.save(cluster(cloud="local").model_copy(update={"name": "old"}))
    assert state.expired_at("old") is None  # the name is a live cluster again


@pytest.mark.parametrize(
    ("blocked", "stack", "extra"),
    [
        ("pulumi", "aws-p4d", "aws"),
        ("pulumi_aws", "aws-p4d", "aws"),
        ("pulumi_tls", "gcp-a2", "gcp"),
        ("pulumi_gcp", "gcp-a2", "gcp"),
        ("pulumi_azure_native", "azure-nd-a100", "azure"),
    ],
)
def test_a_missing_cloud_sdk_names_the_extra(gpufleet_home, blocked, stack, extra):
    """As after `pip install gpufleet-*.whl` without extras: the import of the SDK fails."""
    code = (
        f"import sys; sys.modules[{blocked!r}] = None\n"
        "from gpufleet.cli import main\n"
        f"sys.exit(main(['plan', '--stack', {stack!r}]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert r.returncode == USAGE, r.stderr
    assert f"needs the Python package {blocked!r}, which is not installed" in r.stderr
    assert f'fix: pip install "gpufleet[{extra}]"' in r.stderr
    assert "internal error" not in r.stderr


def test_the_table_is_what_help_shows():
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "--help"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0
    for line in help_text().splitlines():
        assert line.strip() in r.stdout
    assert all(f"| {int(c)} |" in markdown() for c in ExitCode)


def test_gpufleets_own_codes_are_never_1():
    """1 is the job's failure only: no error class of gpufleet's own defaults to it."""
    from gpufleet.components.errors import GpufleetError
    from gpufleet.core import errors

    own = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, Exception)]
    ones = [c.__name__ for c in own if issubclass(c, GpufleetError) and c.exit_code == 1]
    assert sorted(ones) == ["GroupError", "JobFailed"]
    assert GpufleetError("x").exit_code == ExitCode.OPERATION_FAILED


def test_an_unreachable_byo_host_is_unreachable(recorded, capsys, gpufleet_home):
    key = gpufleet_home / "id"
    key.write_text("not read: the host is not reached\n")
    argv = ["up", "--cloud", "ssh", "--hosts", "127.0.0.1:1", "--accept-host-keys"]
    assert main([*argv, "--ssh-key", str(key)]) == ExitCode.UNREACHABLE
    assert "127.0.0.1:1 is not reachable" in capsys.readouterr().err


def test_the_docs_table_and_help_text_are_rendered_from_the_enum(golden):
    golden("exitcodes/exit-codes.md", markdown())
    golden("exitcodes/help.txt", help_text() + "\n")


def test_the_docs_show_the_table_the_code_renders():
    """docs/json-and-exit-codes.md carries the table verbatim, so the two cannot drift."""
    from pathlib import Path

    from gpufleet.components.exitcodes import markdown

    docs = Path(__file__).resolve().parents[3] / "docs" / "json-and-exit-codes.md"
    assert markdown().strip() in docs.read_text()
