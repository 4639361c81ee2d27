"""Rank containers: wrap lines, the probe's refusal, the holding session, the ssh hop, start()."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import types
from pathlib import Path

import pytest

from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerflags import PROBE_MARK, ContainerFabricError, NodeFacts
from gpufleet.core.errors import GpufleetError, MissingTool
from gpufleet.jobs import container, launch, runs
from gpufleet.jobs.launch import LaunchOptions
from tests.gpufleet import fakes

PODMAN = NodeFacts(runtime="podman", cdi=True, gpus=8, mem_bytes=64 << 30)
SUDO_DOCKER = NodeFacts(runtime="docker", sudo=True, cdi=True, gpus=8, mem_bytes=64 << 30)


def test_wrap_runs_the_command_by_sh_in_the_node_container_at_its_workdir():
    # "$PWD": the node's shell is in the workdir (absolute there, maybe relative in the record)
    line = container.wrap_line(PODMAN, "gpufleet-r1", "A=1; export A; echo $A")
    assert line == """podman exec -i -w "$PWD" gpufleet-r1 /bin/sh -c 'A=1; export A; echo $A'"""
    sudo = container.wrap_line(SUDO_DOCKER, "gpufleet-r1", "exec python t.py")
    assert sudo == """sudo -n docker exec -i -w "$PWD" gpufleet-r1 /bin/sh -c 'exec python t.py'"""


def test_wrapped_command_keeps_its_exports_through_a_real_shell():
    # the outer line is what the node's shell runs: /bin/sh -c gets the command intact
    cmd = "X='a b'; export X; printf '%s|' \"$X\" \"$PWD\""
    line = container.wrap_line(PODMAN, "n", cmd)
    argv = shlex.split(line)
    assert argv[-3:] == ["/bin/sh", "-c", cmd]
    out = subprocess.run(argv[-3:], capture_output=True, text=True, cwd="/").stdout
    assert out == "a b|/|"


def test_refuse_names_each_node_and_what_is_missing_with_a_fix():
    facts = {
        "node-0": PODMAN,
        "node-1": NodeFacts(problems=("docker: `docker info` failed", "podman: not installed")),
    }
    with pytest.raises(MissingTool) as e:
        container.refuse(facts, "auto")
    msg = str(e.value)
    assert "node-1" in msg and "node-0" not in msg
    assert "docker: `docker info` failed" in msg and "podman: not installed" in msg
    assert "install docker or podman" in e.value.hint and "without --image" in e.value.hint


class FakeGroup:
    """Records what start() asks of the nodes; probe answers come from `facts`."""

    def __init__(self, info, probe: dict[str, dict]):
        self.info, self.nodes, self.probe = info, list(info.nodes), probe
        self.ran: list[object] = []
        self.held: list[tuple[str, str]] = []

    def run(self, command, check=True, timeout=None, **kw):
        self.ran.append(command)
        out = {}
        for n in self.nodes:
            if isinstance(command, str) and PROBE_MARK in command:
                text = PROBE_MARK + json.dumps(self.probe[n.name])
            elif "gpufleet-container-python:" in str(command):
                text = "gpufleet-container-python:python3"
            else:
                text = ""
            out[n.name] = types.SimpleNamespace(
                exit_code=0, stdout=text, stderr="", ok=True, error=None
            )
        return out

    def subset(self, nodes):
        return self

    def hold(self, node, command, ready, timeout=0):
        self.held.append((node, command))
        return types.SimpleNamespace(close=lambda: None)


def _doc(runtime="podman", why=""):
    return dict(runtime=runtime, version="5", sudo=False, cdi=False, gpus=0, mem=1 << 30,
                uverbs="", why=why)  # fmt: skip


def test_start_refuses_before_anything_runs_when_a_node_has_no_runtime():
    info = fakes.cluster(gpus=0)
    group = FakeGroup(
        info, {"node-0": _doc(), "node-1": _doc("", " docker:missing podman:missing")}
    )
    pulled = []
    with pytest.raises(MissingTool, match="node-1"):
        container.start(info, group, ContainerSpec(image="img:1"), "r1", print,
                        ensure=lambda *a, **k: pulled.append(a))  # fmt: skip
    assert pulled == [] and group.held == []  # no pull, no container


def test_start_probes_pulls_then_holds_one_container_per_node():
    info = fakes.cluster(gpus=0)
    group = FakeGroup(info, {"node-0": _doc(), "node-1": _doc()})
    said: list[str] = []
    seen = {}

    def ensure(info_, group_, spec, facts, progress):
        seen.update(facts)
        return types.SimpleNamespace(image=spec.image, digests={n: "sha256:d" for n in facts})

    spec = ContainerSpec(image="nvcr.io/nvidia/pytorch:25.01-py3", mounts=["/data:/data:ro"])
    boxes = container.start(info, group, spec, "r1", said.append, ensure=ensure)
    assert set(seen) == {"node-0", "node-1"} and seen["node-0"].runtime == "podman"
    assert "image nvcr.io/nvidia/pytorch:25.01-py3 digest sha256:d on 2 nodes" in said
    assert sorted(n for n, _ in group.held) == ["node-0", "node-1"]
    keeper = dict(group.held)["node-1"]
    assert "podman run -d --rm --name gpufleet-r1 " in keeper
    assert '-v "$PWD":"$PWD" -w "$PWD"' in keeper  # the workdir at its absolute path
    assert "--label gpufleet.run=r1" in keeper and "--label gpufleet.cluster=t" in keeper
    assert (
        "-v /data:/data:ro" in keeper
        and "nvcr.io/nvidia/pytorch:25.01-py3 sleep infinity" in keeper
    )
    assert boxes.python == "python3"  # the image's interpreter (the node's is not in there)
    with boxes:
        pass
    rm = [i for i, c in enumerate(group.ran) if "podman rm -f gpufleet-r1" in str(c)]
    ps = [i for i, c in enumerate(group.ran) if "label=gpufleet.run=r1" in str(c)]
    assert rm and ps and rm[0] < ps[0]  # removed, then checked


def test_an_archive_image_runs_by_the_id_each_node_loaded():
    spec = ContainerSpec(image="oci-archive:/tmp/img.tar")
    report = types.SimpleNamespace(
        image="x", digests={"node-0": "sha256:aa", "node-1": "sha256:aa"}
    )
    assert container._images(spec, report, ["node-0", "node-1"]) == {
        "node-0": "sha256:aa",
        "node-1": "sha256:aa",
    }
    reg = ContainerSpec(image="nvcr.io/nvidia/pytorch:25.01-py3")
    assert container._images(reg, report, ["node-0"]) == {
        "node-0": "nvcr.io/nvidia/pytorch:25.01-py3"
    }


def test_sandbox_nodes_share_one_machine_so_each_gets_its_own_name():
    local = fakes.cluster(cloud="local")
    assert container.container_name(local, "r1", "node-1") == "gpufleet-r1-node-1"
    assert container.container_name(fakes.cluster(), "r1", "node-1") == "gpufleet-r1"


def _fake_bin(tmp_path, name: str, body: str) -> None:
    (tmp_path / "bin").mkdir(exist_ok=True)
    p = tmp_path / "bin" / name
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)


def test_keeper_removes_its_container_when_stdin_closes_or_on_term(tmp_path):
    """The holding session against a stub runtime that logs its argv: READY after `run -d`,
    `rm -f` when gpufleet closes the channel (stdin EOF) and when the session watch TERMs."""
    log = tmp_path / "calls"
    _fake_bin(tmp_path, "podman", f'echo "$*" >> {log}\n')
    info = fakes.cluster(gpus=0)
    cmd = container.keeper_command(info, PODMAN, "img:1", "node-0", "r1", ssh_dirs=(str(tmp_path),))
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    for end in ("eof", "term"):
        log.write_text("")
        p = subprocess.Popen(["sh", "-c", cmd], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, text=True)  # fmt: skip
        assert p.stdout is not None and p.stdout.readline().strip() == container.READY
        time.sleep(0.5)
        assert p.poll() is None and "rm -f" not in log.read_text()  # held while the session is
        if end == "eof":
            p.stdin.close()  # type: ignore[union-attr]
        else:
            p.terminate()
        p.wait(timeout=10)
        calls = log.read_text().splitlines()
        assert calls[0].startswith("run -d --rm --name gpufleet-r1 ")
        assert f"-v {tmp_path}:{tmp_path}:ro" in calls[0]  # the key's folder, as it exists
        assert calls[-1] == "rm -f gpufleet-r1", (end, calls)


def test_ssh_hop_lands_in_the_target_nodes_container(tmp_path):
    """The hop, run by sh against a stub `ssh` that prints its argv one per line."""
    info = fakes.cluster(gpus=0)
    facts = {"node-0": PODMAN, "node-1": SUDO_DOCKER}
    (tmp_path / "hop").mkdir()
    hop = tmp_path / "hop" / "ssh"
    hop.write_text(container.hop_script(info, facts, "r1", "/w/.gpufleet/runs/r1/ssh_config"))
    hop.chmod(0o755)
    _fake_bin(tmp_path, "ssh", 'for a in "$@"; do echo "$a"; done\n')
    # the hop's own folder first on PATH, as pdsh sees it: it must not call itself
    env = dict(os.environ, PATH=f"{tmp_path / 'hop'}:{tmp_path / 'bin'}:{os.environ['PATH']}")
    wd = info.node("node-1").workdir

    def hop_argv(*args: str) -> list[str]:
        r = subprocess.run([str(hop), *args], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()

    # Open MPI: agent, plm_rsh_args (-F), host, the orted command words
    got = hop_argv("-F", "/x/cfg", "t-node-1", "orted", "-mca", "ess", "'env'", "a b")
    assert got[-4:-1] == ["-F", "/w/.gpufleet/runs/r1/ssh_config", "t-node-1"]
    inner = shlex.split(got[-1])
    assert inner[:3] == ["cd", wd, "&&"]  # ssh starts in $HOME: the workdir's base
    assert inner[3:10] == ["sudo", "-n", "docker", "exec", "-i", "-w", "$PWD"]
    assert inner[10:13] == ["gpufleet-r1", "/bin/sh", "-c"]
    assert inner[13] == "orted -mca ess 'env' a b"
    # pdsh: `ssh -2 -a -x -lroot HOST -F cfg CMD` (options after the host too)
    got = hop_argv("-2", "-a", "-x", "-lroot", "10.0.0.10", "-F", "/x/cfg", "cd /w; python -u x")
    # the run's ssh config, next to the hop's folder in the run dir, by default
    hop.write_text(container.hop_script(info, facts, "r1"))
    assert hop_argv("t-node-1", "true")[1] == f"{tmp_path}/hop/../ssh_config"
    assert got[:4] == ["-2", "-a", "-x", "-lroot"]
    inner = shlex.split(got[-1])
    assert inner[3:5] == ["podman", "exec"] and inner[-1] == "cd /w; python -u x"
    bad = subprocess.run([str(hop), "elsewhere", "true"], capture_output=True, text=True, env=env)
    assert bad.returncode == 255 and "no node of this run" in bad.stderr


def test_launchers_reach_the_hop_only_in_containers():
    info = fakes.cluster(gpus=1)
    mpi = LaunchOptions(launcher="mpirun", command=["t.py"], run_id="r1")
    assert "plm_rsh_agent" not in launch.node_command(info, 0, mpi)  # type: ignore[operator]
    boxed = launch.node_command(info, 0, LaunchOptions(**{**mpi.__dict__, "container": True}))
    assert '--mca plm_rsh_agent "$PWD/.gpufleet/runs/r1/hop/ssh"' in boxed  # type: ignore[operator]
    assert "plm_rsh_no_tree_spawn 1" in boxed  # type: ignore[operator]
    ds = LaunchOptions(launcher="deepspeed", command=["t.py"], run_id="r1", container=True)
    assert 'PATH="$PWD/.gpufleet/runs/r1/hop:$PATH"' in launch.node_command(info, 0, ds)  # type: ignore[operator]


def test_run_record_keeps_the_image_and_old_records_still_load(gpufleet_home):
    rec = runs.RunRecord(id="old", cluster="c", cloud="local", nodes=1, launcher="none",
                         command=["true"], started_at=1.0)  # fmt: skip
    d = runs.run_dir("old")
    d.mkdir(parents=True)
    old = {k: v for k, v in rec.as_dict().items() if k not in ("image", "digests")}
    (d / runs.RECORD).write_text(json.dumps(old))
    loaded = runs.load("old")
    assert loaded.image is None and loaded.digests == {}
    fields = {k: v for k, v in old.items() if k != "cost_usd"}
    r = runs.Recorder(runs.RunRecord(**{**fields, "id": "new"}))
    r.image("img:1", {"node-0": "sha256:d"})
    r.finish(0, "succeeded")
    back = runs.load("new")
    assert back.image == "img:1" and back.digests == {"node-0": "sha256:d"}


def test_the_run_image_is_the_request_s_else_the_cluster_s_recorded_one(monkeypatch):
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.core import state
    from gpufleet.jobs.run import JobRequest, container_spec

    info = fakes.cluster(gpus=0)
    opts = LaunchOptions(launcher="none", command=["true"])
    mine = ContainerSpec(image="mine:1")
    recorded = ClusterSpec.from_input({"name": "t", "container": {"image": "rec:1"}})
    monkeypatch.setattr(state, "load_spec", lambda name: recorded if name == "t" else None)
    reuse = JobRequest(launch=opts, workdir=Path("."), cluster="t")
    assert container_spec(reuse, info) == recorded.container
    assert container_spec(JobRequest(launch=opts, workdir=Path("."), cluster="t", container=mine),
                          info) == mine  # fmt: skip
    create = JobRequest(launch=opts, workdir=Path("."), spec=recorded.with_(container=None))
    assert container_spec(create, info) is None  # a new cluster's own spec, not a record


def test_health_checks_run_in_the_containers_when_given_wrap():
    from gpufleet.jobs import health

    info = fakes.cluster(gpus=0)
    group = FakeGroup(info, {})
    group.put = lambda files, **kw: None  # type: ignore[attr-defined]
    health.check_cluster(info, group, wrap=lambda n, c: f"IN[{n}] {c}")  # type: ignore[arg-type]
    cmds = group.ran[-1]
    assert isinstance(cmds, dict) and set(cmds) == {"node-0", "node-1"}
    assert all(c.startswith(f"IN[{n}] ") and health.CHECK in c for n, c in cmds.items())


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_keeper_and_the_hop_are_shellcheck_clean(tmp_path):
    info = fakes.cluster(gpus=0)
    facts = {"node-0": PODMAN, "node-1": SUDO_DOCKER}
    keeper = container.keeper_command(info, PODMAN, "img:1", "node-0", "r1", ssh_dirs=("/k",))
    (tmp_path / "keeper.sh").write_text("#!/bin/sh\n" + keeper)
    (tmp_path / "hop.sh").write_text(container.hop_script(info, facts, "r1"))
    r = subprocess.run(
        ["shellcheck", str(tmp_path / "keeper.sh"), str(tmp_path / "hop.sh")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout


# --- review fixes: the catalog's topology file, refusals before the pull, the EFA check, TCPXO's
# profile ---------------------------------------------------------------------------------------
EFA_DOC = dict(_doc("docker"), cdi=True, gpus=8, efa=" /dev/infiniband/uverbs0")


class EfaGroup(FakeGroup):
    """FakeGroup whose containers answer the EFA check as `said` says per node (faked: the
    container and fi_info; real: start()'s order and what it does with the answers)."""

    def __init__(self, info, probe, said: dict[str, tuple[int, str]]):
        super().__init__(info, probe)
        self.said = said

    def run(self, command, check=True, timeout=None, **kw):
        if isinstance(command, dict) and "gpufleet-efa-check:" in str(command):
            self.ran.append(command)
            return {
                n: types.SimpleNamespace(
                    exit_code=rc,
                    stdout=f"gpufleet-efa-check: {text}\n",
                    stderr="",
                    ok=rc == 0,
                    error=None,
                )
                for n, (rc, text) in self.said.items()
            }
        return super().run(command, check=check, timeout=timeout, **kw)


def _efa_cluster():
    return fakes.cluster(fabric="efa").model_copy(update={"instance_type": "p4d.24xlarge"})


def _report(info_, group_, spec, facts, progress):
    return types.SimpleNamespace(image=spec.image, digests={n: "sha256:d" for n in facts})


def test_keeper_mounts_the_catalog_topology_file_of_the_type():
    """Azure ND96asr_v4: catalog nccl_topo_file, read-only and named in NCCL_TOPO_FILE."""
    info = fakes.cluster(cloud="azure", fabric="infiniband").model_copy(
        update={"instance_type": "Standard_ND96asr_v4"}
    )
    topo = "/opt/microsoft/ndv4/topo.xml"
    facts = NodeFacts(runtime="docker", cdi=True, gpus=8, paths=("/dev/infiniband", topo))
    keeper = container.keeper_command(info, facts, "img:1", "node-0", "r1")
    assert f"-v {topo}:{topo}:ro -e NCCL_TOPO_FILE={topo}" in keeper


def test_start_runs_the_efa_check_in_every_container_and_refuses_a_failing_node():
    info = _efa_cluster()
    said = {
        "node-0": (0, "ok: 4 EFA interfaces (need 4), aws-ofi-nccl in ldconfig"),
        "node-1": (
            1,
            "FAIL: fi_info -p efa sees 0 EFA interfaces in the container, the instance type has 4",
        ),
    }
    group = EfaGroup(info, {"node-0": EFA_DOC, "node-1": EFA_DOC}, said)
    with pytest.raises(ContainerFabricError) as e:
        container.start(info, group, ContainerSpec(image="img:1"), "r1", print, ensure=_report)
    assert "node-1: FAIL: fi_info -p efa sees 0 EFA interfaces" in str(e.value)
    assert "node-0" not in str(e.value)
    check = next(c for c in group.ran if "gpufleet-efa-check:" in str(c))
    assert isinstance(check, dict) and set(check) == {"node-0", "node-1"}
    # through wrap: in the run's container, with the type's 4 interfaces (catalog p4d)
    assert all(c.startswith("docker exec -i -w") and "-lt 4 ]" in c for c in check.values())
    assert any("docker rm -f gpufleet-r1" in str(c) for c in group.ran)  # removed on refusal
    ok = EfaGroup(info, {"node-0": EFA_DOC, "node-1": EFA_DOC}, {n: said["node-0"] for n in said})
    said_lines: list[str] = []
    container.start(info, ok, ContainerSpec(image="img:1"), "r1", said_lines.append, ensure=_report)
    assert f"EFA in the containers: {said['node-0'][1]} on 2 nodes" in said_lines


@pytest.mark.parametrize(
    ("doc", "fabric", "error", "why"),
    [
        (dict(_doc(), gpus=8), "none", "ContainerFabricError", "podman reaches NVIDIA GPUs only"),
        (_doc("docker"), "efa", "ContainerFabricError", "no EFA uverbs device on the node"),
        (
            dict(_doc(), rootless=True, memlock="65536"),
            "none",
            "ContainerLimitError",
            "the podman engine runs rootless and the user's hard memlock limit is 65536 KiB",
        ),
    ],
)
def test_start_refuses_gpu_fabric_and_limit_problems_before_the_pull(doc, fabric, error, why):
    info = fakes.cluster(gpus=0, fabric=fabric)
    group = FakeGroup(info, {"node-0": _doc(doc["runtime"]), "node-1": doc})
    pulled: list[object] = []
    with pytest.raises(GpufleetError) as e:
        container.start(
            info,
            group,
            ContainerSpec(image="img:1"),
            "r1",
            print,
            ensure=lambda *a, **k: pulled.append(a),
        )
    assert type(e.value).__name__ == error and f"node-1: {why}" in str(e.value)
    assert pulled == [] and group.held == []  # refused before the pull, no container


def test_keeper_carries_the_tcpxo_profile_nccl_env_into_the_container(tmp_path, monkeypatch):
    """Faked: the plugin's profile (bash syntax, as nccl-env-profile.sh is) at a tmp path, and a
    `docker` that logs its argv and the env file it was given; real: sh running the keeper."""
    from gpufleet.components import containerflags

    profile = tmp_path / "nccl-env-profile.sh"
    profile.write_text(
        '[[ -n "$NCCL_LIB_DIR" ]] && export NCCL_FASTRAK_NUM_FLOWS=2\n'
        "export NCCL_PROTO=Simple,LL128\nexport OTHER=1\n"
    )
    monkeypatch.setattr(containerflags, "TCPXO_PROFILE", str(profile))
    log = tmp_path / "calls"
    logs_env = f'p=; for a in "$@"; do [ "$p" = --env-file ] && cat "$a" >> {log}; p=$a; done\n'
    _fake_bin(tmp_path, "docker", f'echo "$*" >> {log}\n' + logs_env)
    info = fakes.cluster(fabric="tcpxo")
    facts = NodeFacts(
        runtime="docker", rxdm=True, paths=("/var/lib/tcpxo/lib64", "/dev/aperture_devices")
    )
    cmd = container.keeper_command(info, facts, "img:1", "node-0", "r1")
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    p = subprocess.run(["sh", "-c", cmd], input="", capture_output=True, text=True, env=env)
    assert p.returncode == 0 and container.READY in p.stdout, p.stderr
    calls = log.read_text().splitlines()
    assert "--env-file" in calls[0] and calls[0].endswith("img:1 sleep infinity")
    given = sorted(c for c in calls[1:] if " " not in c)  # the env file's lines
    assert given == [
        "NCCL_FASTRAK_NUM_FLOWS=2",  # the profile ran in bash, with NCCL_LIB_DIR set
        "NCCL_LIB_DIR=/var/lib/tcpxo/lib64",
        "NCCL_PROTO=Simple,LL128",
    ]
    assert calls[-1] == "rm -f gpufleet-r1"
    env_file = calls[0].split("--env-file ", 1)[1].split()[0]
    assert not Path(env_file).exists()  # removed once the container has read it


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_tcpxo_keeper_is_shellcheck_clean(tmp_path):
    info = fakes.cluster(fabric="tcpxo")
    facts = NodeFacts(
        runtime="docker", rxdm=True, paths=("/var/lib/tcpxo/lib64", "/dev/aperture_devices")
    )
    (tmp_path / "keeper.sh").write_text(
        "#!/bin/sh\n" + container.keeper_command(info, facts, "img:1", "node-0", "r1")
    )
    r = subprocess.run(["shellcheck", str(tmp_path / "keeper.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


class _Answers(FakeGroup):
    """FakeGroup whose python_command and `ps` answers are given per node (faked: the nodes'
    shells; real: start(), _start's detection, leftovers())."""

    def __init__(self, info, python: dict[str, str], ps: dict[str, types.SimpleNamespace]):
        super().__init__(info, {n.name: _doc() for n in info.nodes})
        self.python, self.ps = python, ps

    def run(self, command, check=True, timeout=None, **kw):
        out = super().run(command, check, timeout, **kw)
        if "gpufleet-container-python:" in str(command):
            for n, p in self.python.items():
                out[n].stdout = f"gpufleet-container-python:{p}\n"
        if "label=gpufleet.run=" in str(command):
            out.update(self.ps)
        return out


def _ensure(info_, group_, spec, facts, progress):
    return types.SimpleNamespace(image=spec.image, digests={n: "sha256:d" for n in facts})


def test_an_image_without_python_is_refused_naming_image_node_and_fix():
    info = fakes.cluster(gpus=0)
    group = _Answers(info, {"node-0": "python3", "node-1": ""}, {})
    boxes = container.start(info, group, ContainerSpec(image="busybox:1"), "r1", print,
                            ensure=_ensure)  # fmt: skip
    with pytest.raises(MissingTool) as e:
        boxes.need_python("torchrun")
    msg = str(e.value)
    print(msg, "|", e.value.hint)
    assert "busybox:1" in msg and "torchrun" in msg and "node-1: none" in msg
    assert "python3" in e.value.hint
    ok = container.start(info, _Answers(info, {"node-0": "python3", "node-1": "python3"}, {}),
                         ContainerSpec(image="img:1"), "r2", print, ensure=_ensure)  # fmt: skip
    ok.need_python("torchrun")  # every node has the same one: nothing to say
    assert ok.python == "python3"


def test_leftovers_asks_every_node_at_once_and_an_unanswered_node_is_not_checked():
    info = fakes.cluster(gpus=0)
    ns = types.SimpleNamespace
    ps = {
        "node-0": ns(exit_code=0, stdout="abc123\n", stderr="", ok=True, error=None),
        "node-1": ns(exit_code=None, stdout="", stderr="", ok=False, error="lost: reset"),
    }
    group = _Answers(info, {"node-0": "python3", "node-1": "python3"}, ps)
    boxes = container.start(info, group, ContainerSpec(image="img:1"), "r1", print,
                            ensure=_ensure)  # fmt: skip
    before = len(group.ran)
    left = boxes.leftovers()
    print(left)
    asked = group.ran[before:]
    assert len(asked) == 1 and isinstance(asked[0], dict) and set(asked[0]) == {"node-0", "node-1"}
    assert left == {"node-0": "abc123", "node-1": "not checked (lost: reset)"}
