"""Image bakes under Pulumi mocks: a builder with the recipe, a wait, then the capture."""

from __future__ import annotations

import base64
import gzip

import pytest

from components import stackconfig
from components.bake import SEAL_COMMAND, bake_program
from components.preview import evaluate

WAIT = "pulumi-python:dynamic:Resource"
CASES = {
    "aws-g5": ("aws:ec2/instance:Instance", "aws:ec2/amiFromInstance:AmiFromInstance"),
    "gcp-g2": ("gcp:compute/instance:Instance", "gcp:compute/image:Image"),
    "azure-nd-a100": (
        "azure-native:compute:VirtualMachine",
        "azure-native:compute:GalleryImageVersion",
    ),
}


def bake_plan(stack: str):
    cfg = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(cfg, stack=stack)
    return evaluate(lambda: bake_program(spec), config=stackconfig.pulumi_config(cfg))


def user_data(builder) -> str:
    i = builder.inputs
    if "userDataBase64" in i:  # AWS: gzipped to fit EC2's 16 KB
        return gzip.decompress(base64.b64decode(i["userDataBase64"])).decode()
    if "userData" in i:
        return i["userData"]
    if "metadata" in i:
        return i["metadata"]["user-data"]
    return base64.b64decode(i["osProfile"]["customData"]).decode()


@pytest.mark.parametrize("stack", sorted(CASES))
def test_builder_runs_the_recipe_then_the_image_is_captured(stack):
    vm_type, image_type = CASES[stack]
    p = bake_plan(stack)
    cloud = stackconfig.spec_from_stack(stack).cloud
    assert p.one(f"gpufleet:{cloud}:ImageBake").name == f"{stack}-image"
    builder = p.one(vm_type)
    text = user_data(builder)
    assert text.startswith("#cloud-config") and "/opt/gpufleet/steps/run-steps.sh" in text
    assert "GPUFLEET_BAKE=1" in text and "GPUFLEET_EXPIRES_AT=''" in text  # no TTL baked in
    wait = p.one(WAIT)
    assert wait.inputs["builder"] == f"{builder.name}-id" and wait.inputs["host"]
    p.one(image_type)
    assert p.outputs["image_id"]


def test_aws_builder_stops_instead_of_terminating():
    builder = bake_plan("aws-g5").one("aws:ec2/instance:Instance")
    assert builder.inputs["instanceInitiatedShutdownBehavior"] == "stop"
    assert builder.inputs["metadataOptions"]["httpTokens"] == "required"
    assert builder.inputs["rootBlockDevice"]["encrypted"] is True


def test_gcp_image_comes_from_the_builders_disk():
    p = bake_plan("gcp-g2")
    image = p.one("gcp:compute/image:Image")
    assert image.inputs["sourceDisk"].endswith("/disks/gcp-g2-image-builder")


def test_azure_capture_is_a_specialized_gallery_image_of_the_builder():
    p = bake_plan("azure-nd-a100")
    assert p.one("azure-native:compute:GalleryImage").inputs["osState"] == "Specialized"
    version = p.one("azure-native:compute:GalleryImageVersion")
    assert version.inputs["storageProfile"]["source"]["virtualMachineId"] == (
        "azure-nd-a100-image-builder-id"
    )


def test_seal_clears_per_node_state_before_power_off():
    for part in ("cloud-init clean", "/etc/gpufleet/env", "ssh_host_", "poweroff"):
        assert part in SEAL_COMMAND
    assert SEAL_COMMAND.rstrip().endswith("systemctl poweroff")
