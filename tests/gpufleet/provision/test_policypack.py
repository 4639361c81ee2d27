"""gpufleet's policy pack as `up` runs it: self-contained, prepared once with its own virtualenv
(a fake `python -m venv` and pip here: no network in tests), refused before anything exists when
it cannot be prepared, left out with --no-policy; its config file removed after use.

Pulumi's Python language host gives a policy pack (an analyzer) no virtualenv unless
PulumiPolicy.yaml names one: `isPlugin := req.Kind != AnalyzerPlugin`, and parseOptions defaults
`virtualenv` to venv only for plugins (pulumi/pulumi sdk/python/cmd/pulumi-language-python/
main.go, parseOptions and RunPlugin, commit 1b59498, read 2026-11-25). PulumiPolicy.yaml's
`runtime: {name: python, options: {toolchain, virtualenv}}` (pulumi.com/docs/
discovery-governance/reference/policy-project-file, runtime options, read 2026-11-25).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from gpufleet.components import catalog
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.provision import policypack
from gpufleet.provision import pulumi as pp

ROOT = Path(__file__).resolve().parents[3]
PACK = ROOT / "policy"


def test_the_pack_families_file_is_generated_from_the_catalog():
    """policy/gpu_families.json is gpu_families_doc's output, never edited by hand
    (GPUFLEET_UPDATE_GOLDEN=1 rewrites it after a catalog change)."""
    text = json.dumps(
        policypack.gpu_families_doc(catalog.types(), policypack.AWS_FAMILIES_OUTSIDE_CATALOG),
        indent=2,
    )
    path = PACK / policypack.FAMILIES_FILE
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        path.write_text(text + "\n")
    assert path.read_text() == text + "\n", "policy/gpu_families.json is stale: regenerate it"


def test_gpu_families_doc_is_each_catalog_type_s_family():
    t = SimpleNamespace
    doc = policypack.gpu_families_doc(
        [
            t(cloud="aws", name="p5.48xlarge", cloud_machine_type="p5.48xlarge"),
            t(cloud="gcp", name="a3-highgpu-8g", cloud_machine_type="a3-highgpu-8g"),
            t(cloud="gcp", name="n1-t4-1", cloud_machine_type="n1-standard-8"),  # accelerators
            t(
                cloud="azure",
                name="Standard_NC24ads_A100_v4",
                cloud_machine_type="Standard_NC24ads_A100_v4",
            ),
        ],  # fmt: skip
        ["g4ad"],
    )
    assert {k: v for k, v in doc.items() if k != "_generated"} == {
        "aws": ["g4ad", "p5"],
        "gcp": ["a3"],
        "azure": ["NC"],
    }


def test_the_manifest_gives_the_pack_its_own_virtualenv():
    manifest = yaml.safe_load((PACK / "PulumiPolicy.yaml").read_text())
    assert manifest["runtime"] == {
        "name": "python",
        "options": {"toolchain": "pip", "virtualenv": "venv"},
    }


def test_the_pack_requires_only_the_policy_sdk():
    lines = [
        line.split("#")[0].strip()
        for line in (PACK / "requirements.txt").read_text().splitlines()
        if line.split("#")[0].strip()
    ]
    assert [line.split(">")[0].split("=")[0].split("<")[0] for line in lines] == ["pulumi-policy"]


class FakeTools:
    """`python -m venv DIR` makes DIR/bin/python; the venv's `pip install -r` records what it
    was asked; `fail` makes pip exit 1 as with no network."""

    def __init__(self, fail: bool = False):
        self.calls: list[list[str]] = []
        self.fail = fail

    def __call__(self, cmd, **_kw):
        self.calls.append(list(cmd))
        if cmd[1:3] == ["-m", "venv"]:
            python = Path(cmd[3]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("#!/bin/sh\n")
            return SimpleNamespace(returncode=0, stdout="", stderr="")
        assert cmd[1:4] == ["-m", "pip", "install"], cmd
        if self.fail:
            return SimpleNamespace(
                returncode=1,
                stdout="",
                stderr="ERROR: Could not find a version that satisfies the requirement "
                "pulumi-policy<2,>=1.21 (from versions: none)",
            )
        return SimpleNamespace(returncode=0, stdout="", stderr="")


@pytest.fixture
def unprepared(monkeypatch):
    monkeypatch.delenv(policypack.ENV, raising=False)  # tests/conftest.py's stand-in
    return monkeypatch


def test_prepare_copies_the_pack_makes_its_venv_once_and_reuses_it(unprepared, gpufleet_home):
    tools, lines = FakeTools(), []
    pack = policypack.prepare(lines.append, run=tools, python="/usr/bin/python3")
    assert pack.parent == gpufleet_home / "policy-pack"
    assert pack.name.startswith(__import__("gpufleet").__version__ + "-")
    for name in ("PulumiPolicy.yaml", "__main__.py", "gpufleet_pack.py", "gpufleet_policy.py",
                 "gpu_families.json", "requirements.txt"):  # fmt: skip
        assert (pack / name).read_bytes() == (PACK / name).read_bytes(), name
    assert tools.calls == [
        ["/usr/bin/python3", "-m", "venv", str(pack / "venv")],
        [str(pack / "venv" / "bin" / "python"), "-m", "pip", "install",
         "--disable-pip-version-check", "--quiet", "-r", str(pack / "requirements.txt")],
    ]  # fmt: skip
    assert lines == [
        f"preparing gpufleet's policy pack in {pack} (once per gpufleet version: a virtualenv "
        "with pulumi-policy)"
    ]
    again = FakeTools()
    assert policypack.prepare(lines.append, run=again) == pack
    assert again.calls == [] and len(lines) == 1  # reused, nothing said


def test_prepare_without_network_refuses_and_leaves_nothing(unprepared, gpufleet_home):
    with pytest.raises(policypack.PolicyPackUnavailable) as e:
        policypack.prepare(lambda _m: None, run=FakeTools(fail=True))
    err = e.value
    assert "`python -m pip install` exited 1 (ERROR: Could not find a version" in str(err)
    assert "nothing was created" in str(err)
    assert "--no-policy" in err.hint and "PIP_FIND_LINKS" in err.hint
    assert "GPUFLEET_POLICY_PACK" in err.hint
    assert err.exit_code == 2
    assert list((gpufleet_home / "policy-pack").iterdir()) == [
        gpufleet_home / "policy-pack" / ".lock"
    ]


def spec(**kw) -> ClusterSpec:
    base = {"name": "t", "cloud": "aws", "nodes": 2, "instance_type": "p4d.24xlarge",
            "ssh_cidrs": ["203.0.113.7/32"]}  # fmt: skip
    return ClusterSpec.from_input({**base, **kw})


class Stack:
    """A fake stack recording what `up` hands the Automation API."""

    def __init__(self, calls):
        self.calls, self.name = calls, "t"
        self.workspace = self

    def set_config(self, *_):
        pass

    def get_all_config(self):
        return {}

    def export_stack(self):
        return SimpleNamespace(deployment={})

    def up(self, **kw):
        configs = [json.loads(Path(p).read_text()) for p in kw.get("policy_pack_configs", [])]
        self.calls.append(("up", kw, configs))
        raise RuntimeError("stop here")  # the outputs are other tests' concern

    def destroy(self, **_):
        self.calls.append(("destroy",))

    def remove_stack(self, _name):
        pass


def run_up(monkeypatch, s: ClusterSpec, tools: FakeTools | None, **options):
    calls: list = []
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda cloud=None: None)
    monkeypatch.setattr(pp.hostkeypin, "require_channel", lambda cloud: None)
    monkeypatch.setattr(pp, "stack_resources", lambda name, backend: None)  # no such stack yet
    monkeypatch.setattr(pp, "_stack", lambda *a, **k: calls.append(("stack",)) or Stack(calls))
    if tools is not None:
        real = policypack.prepare
        monkeypatch.setattr(policypack, "prepare", lambda progress: real(progress, run=tools))
    lines: list[str] = []
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner("file:///tmp/x", **options).up(s, lines.append)
    return calls, lines, e.value


def test_up_prepares_the_pack_and_passes_that_folder(unprepared, gpufleet_home):
    tools = FakeTools()
    calls, lines, _ = run_up(unprepared, spec(), tools)
    up = next(c for c in calls if c[0] == "up")
    (pack,) = up[1]["policy_packs"]
    assert pack == str(policypack.prepared_dir())
    assert (Path(pack) / "venv" / "bin" / "python").is_file()
    assert (Path(pack) / "PulumiPolicy.yaml").is_file()
    assert lines[0].startswith("preparing gpufleet's policy pack in ")
    assert any(line.endswith("policy pack gpufleet)") for line in lines), lines


def test_up_refuses_before_any_stack_when_the_pack_cannot_be_prepared(unprepared):
    calls, lines, err = run_up(unprepared, spec(), FakeTools(fail=True))
    assert isinstance(err, policypack.PolicyPackUnavailable)
    assert calls == []  # no stack, nothing created


def test_no_policy_runs_up_without_the_pack(unprepared):
    tools = FakeTools()
    calls, lines, _ = run_up(unprepared, spec(), tools, policy=False)
    up = next(c for c in calls if c[0] == "up")
    assert "policy_packs" not in up[1]
    assert tools.calls == []  # nothing prepared
    assert any(line.endswith("policy pack NOT run: --no-policy given)") for line in lines)


def test_the_policy_config_file_is_removed_after_up(monkeypatch, policy_pack_prepared):
    calls, _, _ = run_up(monkeypatch, spec(ttl_minutes=10 * 24 * 60), None)
    _, kw, configs = next(c for c in calls if c[0] == "up")
    (path,) = kw["policy_pack_configs"]
    assert configs == [{"gpu-instances-expire": {"maxHours": 241.0}}]  # there during up
    assert not Path(path).exists()  # and gone after it


@pytest.mark.parametrize("command", [["up"], ["run", "--workdir", str(ROOT / "examples"), "--",
                                                "train_ddp.py"]])  # fmt: skip
def test_no_policy_is_refused_where_no_pulumi_stack_runs(gpufleet_home, command):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "gpufleet", command[0], "--cloud", "local", "--no-policy",
         *command[1:]],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
        env={**os.environ, "GPUFLEET_HOME": str(gpufleet_home)},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no_policy: --cloud local runs no policy pack" in done.stderr, done.stderr
    assert not (gpufleet_home / "clusters").exists()
