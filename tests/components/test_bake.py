"""Image bakes under Pulumi mocks: a builder with the recipe, the wait, then a capture after it."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.azure.bake import gallery_name
from gpufleet.components.bake import (
    SEAL_STEPS,
    bake_program,
    parse_probe,
    probe_command,
    seal_command,
)
from gpufleet.components.preview import Plan, evaluate

WAIT = "pulumi-python:dynamic:Resource"
# stack -> (builder type, what must wait for the builder, the image a stack then names)
CASES = {
    "aws-g5": (
        "aws:ec2/instance:Instance",
        "aws:ec2/amiFromInstance:AmiFromInstance",
        "aws:ec2/amiFromInstance:AmiFromInstance",
    ),
    "gcp-g2": (
        "gcp:compute/instance:Instance",
        "gcp:compute/snapshot:Snapshot",
        "gcp:compute/image:Image",
    ),
    "azure-nd-a100": (
        "azure-native:compute:VirtualMachine",
        "azure-native:compute:Snapshot",
        "azure-native:compute:GalleryImageVersion",
    ),
}


def waits(p: Plan):
    """The BuilderReady wait (the other dynamic resource is the builder's Expiry)."""
    (wait,) = [r for r in p.of_type(WAIT) if "probe" in r.inputs]
    return wait


def bake_plan(stack: str) -> Plan:
    cfg = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(cfg, stack=stack)
    return evaluate(lambda: bake_program(spec), config=stackconfig.pulumi_config(cfg))


def user_data(builder) -> str:
    i = builder.inputs
    if "userDataBase64" in i:  # AWS: gzipped to fit EC2's 16 KB
        return gzip.decompress(base64.b64decode(i["userDataBase64"])).decode()
    if "metadata" in i:
        return i["metadata"]["user-data"]
    return gzip.decompress(base64.b64decode(i["osProfile"]["customData"])).decode()


def tags_of(r) -> dict:
    return r.inputs.get("labels") or r.inputs.get("tags") or {}  # GCP: tags are network tags


@pytest.mark.parametrize("stack", sorted(CASES))
def test_builder_runs_the_recipe_and_the_capture_waits_for_it(stack):
    vm_type, after_wait, image_type = CASES[stack]
    p = bake_plan(stack)
    cloud = stackconfig.spec_from_stack(stack).cloud
    bake = p.one(f"gpufleet:{cloud}:ImageBake")
    assert bake.name == f"{stack}-image"
    builder = p.one(vm_type)
    text = user_data(builder)
    assert text.startswith("#cloud-config") and "/opt/gpufleet/steps/run-steps.sh" in text
    # The builder's expiry: BAKE_HOURS after the first apply (epoch 0 under mocks), armed by
    # the same timer as a node's; the seal takes it out again before the capture.
    assert "GPUFLEET_BAKE=1" in text and "GPUFLEET_EXPIRES_AT=10800" in text
    assert "/etc/systemd/system/gpufleet-ttl.timer" in text
    assert tags_of(builder)["gpufleet-cluster"] == stack
    assert tags_of(builder)["gpufleet-expires"] == "10800"
    wait = waits(p)
    assert wait.parent == bake.name and builder.name in wait.depends_on
    assert wait.inputs["builder"] == f"{builder.name}-id" and wait.inputs["host"]
    assert wait.inputs["probe"] == probe_command() and "poweroff" in wait.inputs["seal"]
    assert "rm -f /etc/systemd/system/gpufleet-ttl.service" in wait.inputs["seal"]
    # Nothing reads the builder's disk before the wait is over; the image is kept.
    first = p.one(after_wait)
    assert wait.name in first.depends_on
    image = p.one(image_type)
    assert wait.name in image.depends_on and image.retain_on_delete
    assert tags_of(image)["gpufleet-cluster"] == stack
    assert "gpufleet-expires" not in tags_of(image)  # the image outlives the bake
    assert p.outputs["image_id"]


# EC2 facts, from "Change instance initiated shutdown behavior" (docs.aws.amazon.com/AWSEC2/
# latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html, read 2026-11-25):
# "when you initiate a shutdown from an Amazon EBS backed instance (using a command such as
# shutdown or poweroff), the instance stops. You can change this behavior so that the instance
# terminates instead"; "only applies when you perform a shutdown from the operating system of
# the instance itself. It doesn't apply when you stop an instance using the StopInstances API".
# And CreateImage (API reference, NoReboot, read 2026-11-25): "By default, Amazon EC2 attempts
# to shut down and reboot the instance before creating the image."
EC2_SHUTDOWN_BEHAVIOUR = {"stop": "stopped, still billed for its EBS volume", "terminate": "gone"}
EC2_CREATE_IMAGE_REBOOTS_BY_DEFAULT = True


def test_aws_builder_terminates_on_its_own_shutdown_and_the_capture_stops_it():
    """Issue 19, item 22: a bake's builder whose CLI died must go at its expiry, not stop."""
    p = bake_plan("aws-g5")
    builder = p.one("aws:ec2/instance:Instance")
    behaviour = builder.inputs["instanceInitiatedShutdownBehavior"]
    assert EC2_SHUTDOWN_BEHAVIOUR[behaviour] == "gone"
    assert builder.inputs["metadataOptions"]["httpTokens"] == "required"
    assert builder.inputs["rootBlockDevice"]["encrypted"] is True
    assert builder.inputs["rootBlockDevice"]["volumeType"] == "gp3"
    # So the seal must not power it off from inside (that would terminate it before the
    # capture): it leaves it running, with a transient backstop, and CreateImage stops it.
    wait = waits(p)
    seal, _, backstop = wait.inputs["seal"].partition("systemd-run ")
    assert "poweroff" not in seal and backstop.startswith("--unit=gpufleet-sealed-expire --on-")
    assert wait.inputs["wait_down"] is False
    ami = p.one("aws:ec2/amiFromInstance:AmiFromInstance")
    assert ami.inputs["sourceInstanceId"] == f"{builder.name}-id"
    rebooted = not ami.inputs.get("snapshotWithoutReboot")
    assert rebooted == EC2_CREATE_IMAGE_REBOOTS_BY_DEFAULT  # EC2 stops it for the snapshots
    assert p.outputs["image_id"] == f"{ami.name}-id"


# GCE facts, from "Limit the run time of a VM" (cloud.google.com/compute/docs/instances/
# limit-vm-runtime, read 2026-11-25): a VM with terminationTime (RFC 3339) and
# instanceTerminationAction DELETE is deleted by GCE at that time.
GCE_TERMINATION = {"instanceTerminationAction": "DELETE", "time_format": "%Y-%m-%dT%H:%M:%SZ"}


def test_gcp_builder_is_deleted_by_gce_at_its_expiry():
    import datetime

    p = bake_plan("gcp-g2")
    sched = p.one("gcp:compute/instance:Instance").inputs["scheduling"]
    assert sched["instanceTerminationAction"] == GCE_TERMINATION["instanceTerminationAction"]
    when = datetime.datetime.strptime(sched["terminationTime"], GCE_TERMINATION["time_format"])
    # BAKE_HOURS (3) after the first apply, which under mocks is epoch 0
    assert when.replace(tzinfo=datetime.UTC).timestamp() == 3 * 3600


# GCE clears the termination time of a VM that is stopped, and a stopped VM's persistent disks
# stay billed: ../shared/reference/cloud-gpu-facts.md ("GCP TTL"), from
# https://cloud.google.com/compute/docs/instances/limit-vm-runtime and
# https://cloud.google.com/compute/docs/reference/rest/v1/instances/stop (read 2026-11-25).
GCE_STOPPED = {"termination_time_kept": False, "disks_billed": True}


def test_gcp_backstop_text_says_a_powered_off_builder_outlives_its_termination_time():
    from gpufleet.components.gcp.bake import ImageBake

    seal = seal_command(ImageBake.seal_before, poweroff=ImageBake.seal_powers_off)
    backstop = ImageBake.backstop
    if "poweroff" in seal and not GCE_STOPPED["termination_time_kept"]:
        assert "after the seal" in backstop and "sweep" in backstop
        assert "stopped builder" in backstop and GCE_STOPPED["disks_billed"]


def test_azure_builder_deletes_itself_through_an_identity_assigned_before_it_boots():
    p = bake_plan("azure-nd-a100")
    builder = p.one("azure-native:compute:VirtualMachine")
    identity = p.one("azure-native:managedidentity:UserAssignedIdentity")
    assert builder.inputs["identity"]["type"] == "UserAssigned"
    role = p.one("azure-native:authorization:RoleAssignment")
    assert role.name in builder.depends_on  # in place when the VM boots
    assert role.inputs["scope"] == "azure-nd-a100-image-rg-id"  # the builder's own group only
    text = user_data(builder)
    assert "GPUFLEET_TTL_ACTION=arm-delete" in text and "GPUFLEET_AZURE_CLIENT_ID=" in text
    assert identity.name


def test_gcp_image_is_made_from_a_snapshot_of_the_builders_disk():
    p = bake_plan("gcp-g2")
    builder = p.one("gcp:compute/instance:Instance")
    assert builder.inputs["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert builder.inputs["networkInterfaces"][0]["nicType"] == "GVNIC"
    assert (
        "deeplearning-platform-release" in builder.inputs["bootDisk"]["initializeParams"]["image"]
    )
    snapshot = p.one("gcp:compute/snapshot:Snapshot")
    assert snapshot.inputs["sourceDisk"].endswith(f"/disks/{builder.name}")
    assert not snapshot.retain_on_delete  # only the image outlives the bake
    image = p.one("gcp:compute/image:Image")
    assert image.inputs["sourceSnapshot"].endswith(f"/{snapshot.name}")
    assert "sourceDisk" not in image.inputs  # GCE refuses a disk whose VM is still stopping
    assert {"type": "GVNIC"} in image.inputs["guestOsFeatures"]
    assert p.outputs["image_id"].endswith(f"/{image.name}")


def test_azure_capture_is_a_generalized_gallery_version_of_the_builders_os_disk():
    p = bake_plan("azure-nd-a100")
    builder = p.one("azure-native:compute:VirtualMachine")
    snapshot = p.one("azure-native:compute:Snapshot")
    assert snapshot.inputs["creationData"] == {
        "createOption": "Copy",
        "sourceResourceId": snapshot.inputs["creationData"]["sourceResourceId"],
    }
    assert snapshot.inputs["creationData"]["sourceResourceId"].endswith(f"/{builder.name}-osdisk")
    # Generalized: nodes made from it get their own admin user, key and custom data.
    definition = p.one("azure-native:compute:GalleryImage")
    assert definition.inputs["osState"] == "Generalized"
    assert definition.inputs["hyperVGeneration"] == "V2"
    version = p.one("azure-native:compute:GalleryImageVersion")
    assert version.inputs["storageProfile"] == {
        "osDiskImage": {"source": {"id": f"{snapshot.name}-id"}}
    }
    assert p.outputs["image_id"] == f"{version.name}-id"
    # The gallery and its resource group outlive the bake; the builder's group does not.
    groups = {r.name: r for r in p.of_type("azure-native:resources:ResourceGroup")}
    kept = groups["azure-nd-a100-image-images"]
    assert kept.retain_on_delete and not groups["azure-nd-a100-image-rg"].retain_on_delete
    gallery = p.one("azure-native:compute:Gallery")
    assert gallery.retain_on_delete and definition.retain_on_delete
    assert gallery.inputs["resourceGroupName"] == version.inputs["resourceGroupName"] == kept.name
    assert "-" not in gallery.inputs["galleryName"]
    # The builder's agent state goes before the capture.
    assert "waagent -force -deprovision" in waits(p).inputs["seal"]
    assert "waagent" not in waits(bake_plan("aws-g5")).inputs["seal"]


def test_gallery_names_keep_to_what_azure_accepts():
    for rg in ("t-image-images1a2b3c4d", "_x-y.", "a" * 100):
        name = gallery_name(rg)
        assert name and len(name) <= 80 and "-" not in name
        assert name[0] not in "._" and name[-1] not in "._"


def test_seal_clears_per_node_state_and_logins_then_powers_off():
    cmd = seal_command(("echo first",))
    assert cmd.startswith("sudo -n sh -c ")
    script = cmd[len("sudo -n sh -c ") :].strip("'")
    parts = [s.strip() for s in script.split(";")]
    assert parts[0] == "set -e" and parts[1] == "echo first"
    assert parts[-2:] == ["sync", "systemctl poweroff"]
    for needle in ("cloud-init clean", "/etc/gpufleet/env", "ssh_host_", "authorized_keys"):
        assert any(needle in s for s in SEAL_STEPS), needle


@pytest.mark.parametrize(
    ("out", "want"),
    [
        ('ready\n{"driver": "570"}\n', ("ready", '{"driver": "570"}\n')),
        ("failed\n10-driver failed 3.1\nlog\n", ("failed", "10-driver failed 3.1\nlog\n")),
        ("waiting\n", ("waiting", "waiting")),
        ("sudo: a password is required\n", ("waiting", "sudo: a password is required")),
    ],
)
def test_probe_output_is_read_as_ready_failed_or_waiting(out, want):
    assert parse_probe(out) == want


def test_probe_reads_the_runner_marker_and_step_log():
    cmd = probe_command()
    assert "/var/lib/gpufleet/ready.json" in cmd and "/var/log/gpufleet/steps.log" in cmd
    assert "' failed '" in cmd  # run-steps.sh writes "<step> failed <seconds>"


def test_bake_exports_the_image_id_and_the_builders_expiry():
    p = bake_plan("aws-g5")
    assert sorted(p.outputs) == ["expires_at", "gpufleet_kind", "image_id"]
    assert p.outputs["gpufleet_kind"] == "bake"  # how `sweep` knows a bake's stack
    assert p.outputs["expires_at"] == 3 * 3600  # what `sweep` compares
    assert json.dumps(p.outputs)  # plain values a CLI prints
