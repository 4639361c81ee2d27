"""Health reports: parsing node output, expectations from the catalog, the gate's error."""

from __future__ import annotations

import json
from types import SimpleNamespace

from gpufleet.components.clusterinfo import ClusterInfo, NodeInfo
from gpufleet.jobs import health


def cluster(cloud="local", it=None, fabric="none") -> ClusterInfo:
    return ClusterInfo(
        name="t", cloud=cloud, instance_type=it, ssh_user="u", ssh_key_path="/k",
        known_hosts_path="/kh", fabric=fabric, python="python3",
        nodes=[NodeInfo(name=f"node-{i}", private_ip=f"10.0.0.{i}", public_ip=f"10.0.0.{i}")
               for i in range(2)],
    )  # fmt: skip


def test_report_is_read_from_the_last_json_line():
    doc = {"ok": False, "checks": [{"name": "gpu_count", "ok": False, "detail": "7 of 8"}]}
    out = "some warning\n" + json.dumps(doc) + "\n"
    h = health.parse_report("node-1", 0, out, None)
    assert not h.ok and h.reasons == ["gpu_count: 7 of 8"]


def test_unreadable_or_unreachable_node_fails_with_the_reason():
    assert health.parse_report("node-0", 1, "Traceback ...", None).error == (
        "check exited 1 without a JSON report"
    )
    h = health.parse_report("node-0", None, "", "SSH connection lost")
    assert not h.ok and h.reasons == ["SSH connection lost"]


def test_sandbox_expects_no_gpus():
    exp = health.expected_for(cluster())
    assert exp.gpus == 0 and exp.fabric == "none"
    assert "--expect-gpus 0 --fabric none" in health.check_command(cluster(), exp)


def test_gate_error_names_failing_nodes():
    bad = health.NodeHealth("node-1", False, [{"name": "ecc", "ok": False, "detail": "2 DBE"}])
    e = health.UnhealthyCluster("t", [bad])
    assert "node-1" in str(e) and "ecc: 2 DBE" in str(e) and e.exit_code == 5
    assert "gpufleet health t" in e.hint


def test_cloud_nodes_are_checked_against_the_catalog():
    c = cluster("aws", "p5.48xlarge", "efa")
    exp = health.expected_for(c)
    assert (exp.gpus, exp.gpu_model, exp.fabric_devices, exp.nvswitch) == (8, "H100", 32, True)
    cmd = health.check_command(c, exp)
    assert "--expect-model H100" in cmd and "--expect-fabric-devices 32" in cmd
    assert "--nvswitch" in cmd and "--expect-memory-gib 80" in cmd
    nd = health.expected_for(cluster("azure", "Standard_ND96asr_v4", "infiniband"))
    assert nd.fabric_devices == 8 and nd.busbw_baseline_gbps is None


class FakeGroup:
    """Stands in for remote.Group: node-1 reports a failed check, the others pass."""

    def __init__(self, info):
        self.info, self.calls = info, []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.calls.append("closed")

    def wait_ready(self, timeout, *, refused_fails=False, progress=None):
        self.calls.append(("wait_ready", timeout, refused_fails))

    def put(self, files):
        self.calls.append(("put", sorted(files)))

    def run(self, cmd, *, check=True, timeout=None):
        self.calls.append(("run", cmd))
        bad = {"ok": False, "checks": [{"name": "ecc", "ok": False, "detail": "2 DBE"}]}
        return {
            n.name: SimpleNamespace(
                exit_code=0, error=None, stderr="",
                stdout=json.dumps(bad if n.name == "node-1" else {"ok": True, "checks": []}),
            )
            for n in self.info.nodes
        }  # fmt: skip


def test_check_is_what_the_health_command_does(monkeypatch):
    groups = []
    monkeypatch.setattr(health, "Group", lambda info: groups.append(FakeGroup(info)) or groups[-1])
    reports, probe = health.check(cluster())
    assert probe is None
    assert reports["node-0"].ok and not reports["node-1"].ok
    assert reports["node-1"].reasons == ["ecc: 2 DBE"]
    calls = groups[0].calls
    assert calls[0] == ("wait_ready", 60, True)  # a node refusing SSH fails, it is not awaited
    scripts = sorted(f"{health.REMOTE_DIR}/{n}" for n in (health.CHECK, health.PROBE))
    assert calls[1] == ("put", scripts)
    assert "--expect-gpus 0 --fabric none" in calls[2][1]
    assert calls[-1] == "closed"


def test_check_runs_the_probe_with_fabric_on_the_same_group(monkeypatch):
    groups, said = [], []
    monkeypatch.setattr(health, "Group", lambda info: groups.append(FakeGroup(info)) or groups[-1])

    def probe(info, group, sizes, stream=None):
        assert group is groups[0] and "closed" not in group.calls
        return {"sizes": sizes, "stream": stream}

    monkeypatch.setattr(health, "fabric_probe", probe)
    stream = object()
    _, report = health.check(cluster(), said.append, stream, fabric=True, sizes="1M")
    assert report == {"sizes": "1M", "stream": stream}
    assert said == ["all-reduce probe across 2 nodes"]


def test_the_gate_tells_the_node_check_how_many_nodes_use_the_fabric():
    """The node check asks NCCL which network it loads only where a fabric carries traffic."""
    c = cluster("aws", "p5.48xlarge", "efa")
    assert "--nodes 2" in health.check_command(c, health.expected_for(c))
    local = cluster()
    assert "--nodes" not in health.check_command(local, health.expected_for(local))


class LocalNodes:
    """Each node a process on this machine that really runs the node check (scripts/
    health_check.py). Faked: nvidia-smi, nv-fabricmanager and docker (tests/scripts/fixtures/
    bin, an 8 x A100 NVSwitch node). The host has all three on PATH; `in_container` wraps a
    command into an environment with nvidia-smi alone, as a rank container sees the node (the
    host's Fabric Manager and docker are not in the image)."""

    def __init__(self, info, workdir, fixture):
        import os

        from tests.scripts import FIXTURES

        self.nodes, self.workdir = list(info.nodes), workdir
        self.env = {"LANG": "C.UTF-8", "GPUFLEET_FAKE_SMI_DIR": str(fixture)}
        self.host_path = f"{FIXTURES / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"
        image_bin = workdir / "image-bin"
        image_bin.mkdir()
        (image_bin / "nvidia-smi").symlink_to(FIXTURES / "bin" / "nvidia-smi")
        self.image_path = f"{image_bin}{os.pathsep}/usr/bin{os.pathsep}/bin"
        self.ran: list[str] = []

    def put(self, files):
        for path, text in files.items():
            (self.workdir / path).parent.mkdir(parents=True, exist_ok=True)
            (self.workdir / path).write_text(text)

    def in_container(self, node, cmd):
        import shlex

        return f"PATH={shlex.quote(self.image_path)} sh -c {shlex.quote(cmd)}"

    def run(self, cmd, *, check=True, timeout=None):
        import subprocess

        out = {}
        for n in self.nodes:
            line = cmd if isinstance(cmd, str) else cmd[n.name]
            self.ran.append(line)
            env = {**self.env, "PATH": self.host_path}
            p = subprocess.run(["sh", "-c", line], cwd=self.workdir, env=env, text=True,
                               capture_output=True, timeout=120)  # fmt: skip
            out[n.name] = SimpleNamespace(exit_code=p.returncode, error=None, stdout=p.stdout,
                                          stderr=p.stderr)  # fmt: skip
        return out


def test_the_gate_of_a_run_with_an_image_checks_the_host_outside_and_the_gpus_inside(
    monkeypatch, tmp_path
):
    """An NVSwitch GPU node (8 x A100, Fabric Manager on the host): the gate of a run with an
    image passes, with Fabric Manager and docker checked on the host, the GPUs in the image.
    Before the fix the whole check ran in the container: 'Fabric Manager not found' there."""
    import sys

    from tests.scripts import FIXTURES

    info = cluster().model_copy(update={"python": sys.executable})
    exp = health.Expected(gpus=8, gpu_model="A100", gpu_memory_gib=40, nvswitch=True)
    monkeypatch.setattr(health, "expected_for", lambda _info: exp)
    group = LocalNodes(info, tmp_path, FIXTURES / "a100-sxm4-40gb")
    reports = health.gate(info, group, wrap=group.in_container, python=sys.executable)
    print({n: [c["name"] for c in h.checks] for n, h in reports.items()})
    names = [c["name"] for c in reports["node-0"].checks]
    assert "fabric_manager" in names and "container_runtime" not in names
    assert names.count("gpu_count") == 2  # seen from the host, and from inside the image
    host, inside = group.ran[0], group.ran[-1]
    assert "--no-container-check" in host and "--in-container" not in host
    assert "--in-container" in inside and inside.startswith("PATH=")


def test_a_node_fails_when_either_part_fails():
    ok = health.NodeHealth("node-0", True, checks=[{"name": "gpu_count", "ok": True}])
    bad = health.NodeHealth("node-0", False, error="check exited 127 without a JSON report")
    merged = health._merged(ok, bad)
    assert not merged.ok and merged.reasons == ["container: check exited 127 without a JSON report"]
