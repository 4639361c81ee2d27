"""The node pull script as shipped, and the boot pull in each cloud's cloud-init (golden, schema,
Pulumi mocks)."""

from __future__ import annotations

import base64
import gzip
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib

from gpufleet.components import containerpull
from gpufleet.components.bootstrap import BootstrapContext, render_cloud_init
from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.containerimage import parse
from tests.components.stackplans import plan

ROOT = Path(__file__).resolve().parents[2]
ECR = "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/train:v1"
CONTEXTS = {
    "context-aws-container": BootstrapContext(
        "ctr", "aws", "p5.48xlarge", 1, 2, "ubuntu", "ssh-ed25519 AAAAuser u", "", "", "efa",
        1_900_000_000, container=ContainerSpec(image=ECR, pull_stall_s=120, pull_attempts=4),
    ),
}  # fmt: skip


def test_script_is_the_shipped_file_and_packaged():
    assert (ROOT / "scripts" / "container_pull.sh").read_text() == containerpull.SCRIPT
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert data["package-dir"]["gpufleet.components._shipped.scripts"] == "scripts"
    assert "*.sh" in data["package-data"]["gpufleet.components._shipped.scripts"]


@pytest.mark.skipif(not shutil.which("shellcheck"), reason="shellcheck is not installed")
@pytest.mark.parametrize(
    "image",
    [
        ECR,
        "docker.io/library/ubuntu:24.04",
        "myregistry01.azurecr.io/t:v1",
        "us-docker.pkg.dev/p/r/t:v1",
    ],
)
def test_script_and_boot_script_are_shellcheck_clean(tmp_path, image):
    boot = containerpull.boot_script(parse(image))
    for name, text in (("pull.sh", containerpull.SCRIPT), ("boot.sh", boot)):
        (tmp_path / name).write_text(text)
        r = subprocess.run(["shellcheck", str(tmp_path / name)], capture_output=True, text=True)
        assert r.returncode == 0, name + r.stdout


def test_command_line_per_interface():
    line = containerpull.command(
        parse(ECR), runtime="docker", sudo=True, state_dir="/var/lib/gpufleet/pull",
        stall_s=300, attempts=3, script_path="/tmp/x y/pull.sh",
    )  # fmt: skip
    assert shlex.split(line) == [
        "bash", "/tmp/x y/pull.sh", "--image", ECR, "--runtime", "docker", "--sudo",
        "--state", "/var/lib/gpufleet/pull", "--stall", "300", "--attempts", "3",
    ]  # fmt: skip
    archive = containerpull.command(
        parse("oci-archive:/srv/img.tar"), runtime="podman", sudo=False, state_dir="/s",
        stall_s=60, attempts=1, script_path="/p.sh",
    )  # fmt: skip
    assert shlex.split(archive)[2:6] == ["--archive", "/srv/img.tar", "--transport", "oci-archive"]
    assert "--sudo" not in archive
    with pytest.raises(ValueError):
        containerpull.command(parse(ECR), runtime="crio", sudo=False, state_dir="/s",
                              stall_s=1, attempts=1, script_path="/p")  # fmt: skip


@pytest.mark.parametrize(
    ("image", "boots"),
    [
        (ECR, True),
        ("us-central1-docker.pkg.dev/p/r/i:v1", True),
        ("myregistry01.azurecr.io/t/i:v1", True),
        ("ubuntu:24.04", True),
        ("nvcr.io/nvidia/pytorch:25.01-py3", False),  # needs the user's key: the CLI pulls
        ("oci-archive:/home/me/img.tar", False),  # the file is on the CLI's machine
        ("docker-archive:/home/me/img.tar", False),
    ],
)
def test_boot_pull_only_where_the_node_can_pull_alone(image, boots):
    ctx = BootstrapContext("c", "aws", "g5.xlarge", 0, 1, "u", "k", "", "", "none", None,
                           container=ContainerSpec(image=image))  # fmt: skip
    text = render_cloud_init(ctx)
    assert ("gpufleet-pull.service" in text) is boots
    assert (containerpull.BOOT_SCRIPT_PATH in text) is boots


def test_no_container_no_boot_pull():
    ctx = BootstrapContext("c", "aws", "g5.xlarge", 0, 1, "u", "k", "", "", "none", None)
    assert "gpufleet-pull" not in render_cloud_init(ctx)


@pytest.mark.parametrize("name", CONTEXTS)
def test_golden_cloud_init_with_a_container(golden, name):
    golden(f"cloud-init/{name}.yaml", render_cloud_init(CONTEXTS[name]))


@pytest.mark.skipif(not shutil.which("cloud-init"), reason="cloud-init is not installed")
@pytest.mark.parametrize("name", CONTEXTS)
def test_cloud_init_schema_accepts_the_boot_pull(tmp_path, name):
    from tests.components.test_bootstrap import schema_check

    path = tmp_path / "user-data.yaml"
    path.write_text(render_cloud_init(CONTEXTS[name]))
    r = schema_check(path)
    assert r.returncode == 0 and "Valid cloud-config" in r.stdout, r.stdout + r.stderr


def test_boot_pull_unit_runs_in_the_background_after_network_and_runtime():
    text = render_cloud_init(CONTEXTS["context-aws-container"])
    unit = text.split("- path: /etc/systemd/system/gpufleet-pull.service", 1)[1].split("- path:")[0]
    assert "After=network-online.target" in unit
    assert "TimeoutStartSec=infinity" in unit and "WantedBy=multi-user.target" in unit
    # --no-block: cloud-init's runcmd does not wait for the pull (it overlaps the recipe)
    assert "- [systemctl, enable, --now, --no-block, gpufleet-pull.service]" in text
    start = f"ExecStart=/bin/bash {containerpull.BOOT_SCRIPT_PATH} {ECR} 'docker podman'"
    assert f"{start} /var/lib/gpufleet/pull 120 4" in unit


def test_runtime_named_in_the_spec_is_the_only_one_waited_for():
    boot = containerpull.boot_pull(parse(ECR), runtime="podman", stall_s=300, attempts=3)
    assert boot is not None and shlex.split(boot)[3] == "podman"


def test_user_data_with_the_pull_fits_ec2():
    """EC2 takes 16 KB of user data (components/aws/fleet.py USER_DATA_LIMIT), gzipped here."""
    from gpufleet.components.aws.fleet import encode_user_data

    packed = base64.b64decode(
        encode_user_data(render_cloud_init(CONTEXTS["context-aws-container"]))
    )
    print(f"aws p5 user data with the boot pull: {len(packed)} bytes gzipped")
    assert gzip.decompress(packed).decode().startswith("#cloud-config")


def _user_data(p) -> list[str]:
    out = []
    for r in p.resources:
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
            out.append(gzip.decompress(base64.b64decode(r.inputs["userData"])).decode())
        elif r.type == "gcp:compute/instance:Instance":
            out.append(r.inputs["metadata"]["user-data"])
        elif r.type == "azure-native:compute:VirtualMachine":
            raw = base64.b64decode(r.inputs["osProfile"]["customData"])
            out.append((gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode())
    return out


@pytest.mark.parametrize(
    ("stack", "image"),
    [
        ("aws-g5", ECR),
        ("gcp-g2", "us-central1-docker.pkg.dev/proj/repo/train:v1"),
        ("azure-nd-a100", "myregistry01.azurecr.io/team/train:v1"),
    ],
)
def test_each_clouds_fleet_renders_the_boot_pull(stack, image):
    """Pulumi mocks (components/preview.evaluate): spec.container reaches every node's user data."""
    # an ACR image on Azure names its registry (each node gets AcrPull on it)
    rid = (
        "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/g/providers/"
        "Microsoft.ContainerRegistry/registries/myregistry01"
        if ".azurecr.io/" in image
        else None
    )
    texts = _user_data(plan(stack, container=ContainerSpec(image=image, registry_id=rid)))
    start = f"{containerpull.BOOT_SCRIPT_PATH} {image} "
    assert texts and all("gpufleet-pull.service" in t and start in t for t in texts)
    assert not any("gpufleet-pull" in t for t in _user_data(plan(stack)))
