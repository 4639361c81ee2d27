"""The Pulumi driver's edges that need no cloud: missing CLI, backend, passphrase, SSH CIDRs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from components.errors import SpecError
from components.registry import provider_config
from components.spec import ClusterSpec
from gpufleet.provision import pulumi as pp
from tests.integration.conftest import ROOT


def spec(**kw) -> ClusterSpec:
    base = {"name": "t", "cloud": "aws", "nodes": 2, "instance_type": "p4d.24xlarge"}
    return ClusterSpec.from_input({**base, **kw})


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_up_without_pulumi_cli_is_exit_2_and_records_nothing(gpufleet_home, tmp_path, cloud):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    env = {
        "PATH": str(bindir),  # no pulumi here; python is called by absolute path
        "HOME": str(tmp_path),  # no ~/.pulumi/bin/pulumi either
        "GPUFLEET_HOME": str(gpufleet_home),
    }
    types = {"aws": "p4d.24xlarge", "gcp": "a2-highgpu-8g", "azure": "Standard_ND96asr_v4"}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "up", "--cloud", cloud, "--nodes", "2",
         "--name", "t", "-t", types[cloud], "--ssh-cidr", "203.0.113.0/24"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "pulumi is not installed" in r.stderr and "get.pulumi.com" in r.stderr
    assert "Traceback" not in r.stderr
    assert list(gpufleet_home.iterdir()) == []


def test_find_pulumi_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(pp.MissingTool) as e:
        pp.find_pulumi()
    assert e.value.exit_code == 2 and "get.pulumi.com" in e.value.install


def test_find_pulumi_finds_the_installer_location(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("HOME", str(tmp_path))
    binary = tmp_path / ".pulumi" / "bin" / "pulumi"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    assert pp.find_pulumi() == str(binary)


def test_backend_defaults_to_a_file_backend_under_gpufleet_home(gpufleet_home, monkeypatch):
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    assert pp.backend_url() == f"file://{gpufleet_home}/pulumi"
    assert (gpufleet_home / "pulumi").is_dir()
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://bucket/state")
    assert pp.backend_url() == "s3://bucket/state"
    assert pp.backend_url("gs://other") == "gs://other"


def test_generated_passphrase_is_private_and_stable(gpufleet_home, monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    first = pp.passphrase()
    path = gpufleet_home / "pulumi-passphrase"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(first) >= 32 and pp.passphrase() == first
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "mine")
    assert pp.passphrase() == "mine"


def test_ssh_cidrs_default_to_the_callers_address():
    assert pp.with_ssh_cidrs(spec(), learn=lambda: "198.51.100.7/32").ssh_cidrs == [
        "198.51.100.7/32"
    ]
    given = spec(ssh_cidrs=["203.0.113.0/24"])
    assert pp.with_ssh_cidrs(given, learn=lambda: "198.51.100.7/32") is given


def test_unlearnable_address_never_opens_ssh_to_the_world():
    with pytest.raises(SpecError) as e:
        pp.with_ssh_cidrs(spec(), learn=lambda: None)
    assert e.value.field == "ssh_cidrs" and "--ssh-cidr" in e.value.fix


@pytest.mark.parametrize(
    ("cloud", "it", "key"),
    [("aws", "p4d.24xlarge", "aws:region"), ("gcp", "a2-highgpu-8g", "gcp:region"),
     ("azure", "Standard_ND96asr_v4", "azure-native:location")],
)  # fmt: skip
def test_provider_config_places_the_region(cloud, it, key):
    zone = {"zone": "somewhere-1-b"} if cloud == "gcp" else {}  # GCP: no GPU zone is known there
    cfg = provider_config(spec(cloud=cloud, instance_type=it, region="somewhere-1", **zone))
    assert cfg == {key: "somewhere-1"}


def test_dynamic_provider_process_loads_the_bake_wait_from_this_checkout(tmp_path, monkeypatch):
    from pathlib import Path

    from pulumi.dynamic.dynamic import serialize_provider

    from components.bake import _BuilderReadyProvider

    monkeypatch.delenv("PULUMI_PYTHON_CMD", raising=False)
    env = pp.workspace_env(f"file://{tmp_path}")
    assert env["PULUMI_PYTHON_CMD"] == sys.executable  # pulumi and paramiko are here
    blob = serialize_provider(_BuilderReadyProvider())  # by reference: module and class name
    # What `$PULUMI_PYTHON_CMD -m pulumi.dynamic` does with it, started in the workspace folder.
    load = (
        "import base64, dill, inspect, sys; "
        "print(inspect.getfile(type(dill.loads(base64.b64decode(sys.argv[1])))))"
    )
    r = subprocess.run(
        [env["PULUMI_PYTHON_CMD"], "-c", load, blob],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": env["PYTHONPATH"]},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()) == Path(ROOT) / "components" / "bake.py"


def test_workspace_env_keeps_a_python_the_user_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("PULUMI_PYTHON_CMD", "/opt/py/bin/python3")
    monkeypatch.setenv("PYTHONPATH", "/extra")
    env = pp.workspace_env(f"file://{tmp_path}")
    assert env["PULUMI_PYTHON_CMD"] == "/opt/py/bin/python3"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/extra"]
    assert env["PULUMI_BACKEND_URL"] == f"file://{tmp_path}" and env["PULUMI_CONFIG_PASSPHRASE"]
