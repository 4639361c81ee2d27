"""Cloud-init rendering: golden per stack, valid for `cloud-init schema`, strict templates."""

from __future__ import annotations

import shutil
import subprocess

import jinja2
import pytest

from components import bootstrap, stackconfig
from components.bootstrap import BootstrapContext, render_cloud_init

STACKS = stackconfig.stack_names()
EXPIRES = 1_900_000_000


def rendered(stack: str, node: int = 0) -> str:
    spec = stackconfig.spec_from_stack(stack)
    return render_cloud_init(bootstrap.placeholder_context(spec, node, EXPIRES))


@pytest.mark.parametrize("stack", STACKS)
def test_golden_per_stack(golden, stack):
    golden(f"cloud-init/{stack}.yaml", rendered(stack))


@pytest.mark.skipif(not shutil.which("cloud-init"), reason="cloud-init is not installed")
@pytest.mark.parametrize("stack", STACKS)
def test_cloud_init_schema_accepts_every_stack(tmp_path, stack):
    path = tmp_path / "user-data.yaml"
    path.write_text(rendered(stack, node=1))
    r = subprocess.run(["cloud-init", "schema", "-c", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Valid cloud-config" in r.stdout


def test_every_step_is_embedded_and_run_in_order():
    text = rendered("aws-p4d")
    names = [name for name, _ in bootstrap.step_files()]
    assert names[0] == "00-base.sh" and "run-steps.sh" in names and "lib.sh" in names
    positions = [text.index(f"- path: /opt/gpufleet/steps/{n}") for n in names]
    assert positions == sorted(positions)
    assert "ExecStart=/bin/bash /opt/gpufleet/steps/run-steps.sh" in text


def test_node_env_carries_versions_fabric_and_expiry():
    ctx = BootstrapContext("c", "aws", "p5.48xlarge", 1, 2, "ubuntu", "u", "k", "h", "efa", EXPIRES)
    env = bootstrap.node_env(ctx)
    assert env["GPUFLEET_NVSWITCH"] == "1" and env["GPUFLEET_GPUS"] == "8"
    assert env["GPUFLEET_FABRIC_MANAGER"] == env["GPUFLEET_DRIVER_VERSION"]
    assert env["GPUFLEET_EXPIRES_AT"] == str(EXPIRES) and env["GPUFLEET_NODE"] == "node-1"


def test_host_key_lands_as_a_block(tmp_path):
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAA\nBBB\n-----END OPENSSH PRIVATE KEY-----\n"
    ctx = BootstrapContext(
        "c", "gcp", "a3-highgpu-8g", 0, 2, "u", "ssh-ed25519 X u", key, "ssh-ed25519 Y h", "tcpx"
    )
    import yaml

    doc = yaml.safe_load(render_cloud_init(ctx))
    assert doc["ssh_keys"]["ed25519_private"] == key
    assert doc["users"][1]["ssh_authorized_keys"] == ["ssh-ed25519 X u"]
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    assert "NCCL_NET=GPUDirectTCPX_v7" in files["/etc/gpufleet/nccl.env"]


def test_template_is_strict_about_missing_values():
    with pytest.raises(jinja2.UndefinedError):
        bootstrap._template().render(cluster="c")
