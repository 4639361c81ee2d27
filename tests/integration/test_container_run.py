"""`run` with an image on a REAL 2-node sandbox through a FAKE `podman` (fakeruntime.py).

Real: the sandbox's sshd nodes, gpufleet's SSH sessions, the held container sessions, torchrun,
mpirun (Open MPI, over ssh with the run's ssh config), the commands. Faked: the container
runtime (a script named podman first on the nodes' PATH: containers are process groups and
state files, an exec gets a container's environment, not the session's), the image pull (a
stand-in for gpufleet.jobs.pull.ensure_image that reports one digest per node), and
check_host (this machine's real runtime cannot start a container; test_containerhost.py
covers that).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.core import state
from gpufleet.core.errors import JobFailed
from gpufleet.jobs import containerhost, health, launch, pull, runs
from gpufleet.jobs.launch import LaunchOptions
from gpufleet.jobs.run import JobRequest, run_job
from gpufleet.provision import localsshd
from tests.integration import fakeruntime
from tests.integration.conftest import ROOT, cli_env, requires_sshd, requires_torch

pytestmark = requires_sshd
IMAGE = "docker.io/library/fake:1"
DIGEST = "sha256:" + "ab" * 32


def _ensure_image(info, group, spec, facts, progress, *, parallel=True):
    """Stand-in for pull.ensure_image: the same digest on every node, nothing pulled."""
    progress(f"(fake pull of {spec.image} on {len(facts)} nodes)")
    return types.SimpleNamespace(
        image=spec.image,
        digests={n: DIGEST for n in facts},
        seconds={n: 0.0 for n in facts},
        bytes={n: 0 for n in facts},
        archive_bytes=None,
    )


@pytest.fixture
def fake_podman(tmp_path_factory, monkeypatch):
    """The fake podman first on every sandbox node's PATH; the pull stand-in; teardown kills
    whatever the fake started, even when the test failed."""
    root = tmp_path_factory.mktemp("fakeruntime")
    st = root / "state"
    fakeruntime.install(root / "bin", st)
    path = localsshd.node_path()
    monkeypatch.setattr(localsshd, "node_path", lambda: f"{root / 'bin'}:{path}")
    monkeypatch.setattr(pull, "ensure_image", _ensure_image)
    monkeypatch.setattr(containerhost, "check_host", lambda runtime: None)
    monkeypatch.setenv("GPUFLEET_FAKE_PODMAN_ROOT", str(root))
    yield st
    fakeruntime.kill_all(st)


def _request(name, workdir, launcher, command, run_id, **kw) -> JobRequest:
    return JobRequest(
        launch=LaunchOptions(launcher=launcher, command=command, nproc_per_node=1, run_id=run_id),
        workdir=workdir,
        cluster=name,
        container=ContainerSpec(image=IMAGE, runtime="podman"),
        **kw,
    )


def _run(req: JobRequest) -> tuple[int | Exception, list[str], list[tuple[str, str]]]:
    said: list[str] = []
    lines: list[tuple[str, str]] = []
    try:
        code: int | Exception = run_job(req, said.append, lambda n, ln, e: lines.append((n, ln)))
    except Exception as e:
        code = e
    print(*(f"gpufleet: {m}" for m in said), *(f"[{n}] {ln}" for n, ln in lines), sep="\n")
    return code, said, lines


def _assert_removed(st: Path) -> None:
    until = time.monotonic() + 10
    while (fakeruntime.live_groups(st) or fakeruntime.containers(st)) and time.monotonic() < until:
        time.sleep(0.1)
    assert fakeruntime.containers(st) == []
    assert fakeruntime.live_groups(st) == []


def _execs(st: Path, container: str) -> list[dict]:
    return [c for c in fakeruntime.calls(st) if c["op"] == "exec" and c["name"] == container]


@requires_torch
def test_torchrun_ddp_runs_every_rank_and_the_store_in_the_containers(
    make_sandbox, gpufleet_home, fake_podman, tmp_path
):
    info = make_sandbox("ct", 2)
    shutil.copy(ROOT / "examples" / "train_ddp.py", tmp_path / "train_ddp.py")
    req = _request("ct", tmp_path, "torchrun", ["train_ddp.py", "--steps", "20"], "r-ddp")
    code, said, lines = _run(req)
    assert code == 0, (code, said, lines)
    out = [f"[{n}] {ln}" for n, ln in lines]
    assert any(ln.startswith("[node-0] rank 0/2 up") for ln in out), out
    assert any(ln.startswith("[node-1] rank 1/2 up") for ln in out), out
    assert any(ln.startswith("[node-0] done ") and "world_size=2" in ln for ln in out), out
    assert f"image {IMAGE} digest {DIGEST} on 2 nodes" in said
    for k, node in enumerate(info.nodes):
        box = f"gpufleet-r-ddp-{node.name}"
        runs_ = [c for c in fakeruntime.calls(fake_podman) if c["op"] == "run" and c["name"] == box]
        assert len(runs_) == 1 and "gpufleet.run=r-ddp" in runs_[0]["argv"]
        assert f"{node.workdir}:{node.workdir}" in runs_[0]["argv"]  # the workdir, same path
        agents = [c for c in _execs(fake_podman, box) if "torch.distributed.run" in c["cmd"][-1]]
        assert len(agents) == 1 and agents[0]["workdir"] == node.workdir
        assert f"GPUFLEET_NODE_RANK={k}" in agents[0]["cmd"][-1]
    store = [
        c for c in _execs(fake_podman, "gpufleet-r-ddp-node-0") if launch.STORE in c["cmd"][-1]
    ]
    assert len(store) == 1  # the rendezvous store ran in the head's container
    rec = runs.load("r-ddp")
    assert rec.image == IMAGE and rec.digests == {"node-0": DIGEST, "node-1": DIGEST}
    _assert_removed(fake_podman)


def test_none_job_and_setup_run_inside_with_the_rank_env_and_workdir(
    make_sandbox, gpufleet_home, fake_podman, tmp_path
):
    info = make_sandbox("cn", 2)
    show = "echo in=$container rank=$GPUFLEET_NODE_RANK world=$GPUFLEET_WORLD_SIZE pwd=$(pwd)"
    req = _request(
        "cn", tmp_path, "none", [show], "r-none", setup="echo setup-in=$container",
        health_gate=health.gate_hook,
    )  # fmt: skip
    code, said, lines = _run(req)
    assert code == 0, (code, said, lines)
    for node in info.nodes:  # the health gate's node check ran in each node's container
        box = f"gpufleet-r-none-{node.name}"
        assert any(health.CHECK in c["cmd"][-1] for c in _execs(fake_podman, box))
    for k, node in enumerate(info.nodes):
        mine = [ln for n, ln in lines if n == node.name]
        # `container=fake` is only in the fake's exec environment: the line ran in there
        assert "setup-in=fake" in mine
        want = launch.rank_env(info, k, req.launch)
        assert f"in=fake rank={k} world={want['GPUFLEET_WORLD_SIZE']} pwd={node.workdir}" in mine
    _assert_removed(fake_podman)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI is not installed")
def test_mpirun_hops_into_the_other_nodes_container(
    make_sandbox, gpufleet_home, fake_podman, tmp_path
):
    make_sandbox("cm", 2)
    (tmp_path / "who.py").write_text(
        "import os\nprint('rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'],"
        " 'in', os.environ.get('container'), flush=True)\n"
    )
    code, said, lines = _run(_request("cm", tmp_path, "mpirun", ["who.py"], "r-mpi"))
    assert code == 0, (code, said, lines)
    assert ("node-0", "rank 0 of 2 in fake") in lines and ("node-1", "rank 1 of 2 in fake") in lines
    # mpirun ran in node-0's container; its daemon on node-1 came through the hop's ssh into
    # node-1's container (Open MPI's orted, started by `podman exec ... /bin/sh -c`)
    assert any("mpirun" in c["cmd"][-1] for c in _execs(fake_podman, "gpufleet-r-mpi-node-0"))
    assert any("orted" in c["cmd"][-1] for c in _execs(fake_podman, "gpufleet-r-mpi-node-1"))
    _assert_removed(fake_podman)


def test_fail_fast_removes_every_container_and_what_ran_in_it(
    make_sandbox, gpufleet_home, fake_podman, tmp_path
):
    make_sandbox("cf", 2)
    job = 'if [ "$GPUFLEET_NODE_RANK" = 1 ]; then sleep 1; exit 3; fi; sleep 300'
    started = time.monotonic()
    code, said, lines = _run(_request("cf", tmp_path, "none", [job], "r-ff"))
    assert isinstance(code, JobFailed) and code.code == 3, (code, said)
    assert time.monotonic() - started < 60
    # node-0's `sleep 300` was in its container, out of reach of the host-side kill
    assert any("sleep 300" in c["cmd"][-1] for c in _execs(fake_podman, "gpufleet-r-ff-node-0"))
    _assert_removed(fake_podman)


DRIVER = """
import sys, types
sys.path.insert(0, {root!r})
from tests.integration.test_container_run import _ensure_image, _request
from gpufleet.jobs import pull
pull.ensure_image = _ensure_image
from gpufleet.jobs import containerhost
containerhost.check_host = lambda runtime: None  # the fake runtime is on the nodes' PATH only
from pathlib import Path
from gpufleet.core.signals import install_handlers
from gpufleet.jobs.run import run_job
install_handlers()
req = _request(sys.argv[1], Path({workdir!r}), "none", ["echo started; sleep 300"], "r-int")
def stream(n, ln, e):
    print(f"[{{n}}] {{ln}}", flush=True)
try:
    run_job(req, lambda m: print("gpufleet:", m, flush=True), stream)
except Exception as e:
    print("ended:", type(e).__name__, getattr(e, "exit_code", None), flush=True)
    sys.exit(getattr(e, "exit_code", 1))
"""


def _driver(home: Path, workdir: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER.format(root=str(ROOT), workdir=str(workdir)), name],
        env=dict(cli_env(home), PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _until_started(p: subprocess.Popen) -> list[str]:
    seen = []
    assert p.stdout is not None
    for line in p.stdout:
        seen.append(line)
        if sum("started" in ln for ln in seen) == 2:
            break
    return seen


def test_a_killed_cli_s_containers_go_with_its_ssh_sessions(
    make_sandbox, gpufleet_home, fake_podman, tmp_path
):
    """kill -9: no teardown runs; each node's holding session ends with the connection and
    its trap removes the container (and what runs in it)."""
    make_sandbox("ck", 2)
    p = _driver(gpufleet_home, tmp_path, "ck")
    try:
        seen = _until_started(p)
        assert len(fakeruntime.containers(fake_podman)) == 2, seen
        p.kill()
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    _assert_removed(fake_podman)


def test_ctrl_c_removes_every_container_and_what_ran_in_it(
    make_sandbox, gpufleet_home, fake_podman, tmp_path
):
    make_sandbox("ci", 2)
    p = _driver(gpufleet_home, tmp_path, "ci")
    try:
        seen = _until_started(p)
        assert len(_execs(fake_podman, "gpufleet-r-int-node-0")) >= 1, seen
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, "".join(seen) + rest
    assert "stopping the job on every node" in rest
    _assert_removed(fake_podman)
    assert state.exists("ci")  # the cluster was reused, not ours to remove
    assert os.path.isdir(tmp_path)


def test_exec_with_an_image_runs_in_fresh_containers_and_removes_them(
    make_sandbox, gpufleet_home, fake_podman
):
    from gpufleet.jobs.exec import exit_code, run_on_nodes

    info = make_sandbox("ce", 2)
    spec = ContainerSpec(image=IMAGE, runtime="podman")
    said: list[str] = []
    results = run_on_nodes(
        info, ["echo", "in=$container", "pwd=$(pwd)"], [], None, None, container=spec,
        progress=said.append,
    )  # fmt: skip
    assert exit_code(results) == 0
    for node in info.nodes:
        assert results[node.name].stdout.strip() == f"in=fake pwd={node.workdir}"
    assert f"image {IMAGE} digest {DIGEST} on 2 nodes" in said
    _assert_removed(fake_podman)


def test_the_sandbox_refuses_an_image_this_machine_cannot_run(
    make_sandbox, gpufleet_home, tmp_path
):
    """No fakes for the check: this machine's own runtime (its real state), before anything."""
    from tests.gpufleet.jobs.test_containerhost import _can_start_here

    if _can_start_here():
        pytest.skip("this machine starts containers")
    make_sandbox("cr", 2)
    code, said, lines = _run(_request("cr", tmp_path, "none", ["echo ran"], "r-refused"))
    assert isinstance(code, containerhost.HostCannotRunContainers), (code, said)
    assert "--cloud vm" in code.hint
    assert lines == [] and not any("SSH ready" in m for m in said)  # nothing ran, not even SSH
