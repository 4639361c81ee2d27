"""Azure VM settings ARM holds us to: immutable fields, customData's limit, boot diagnostics,
the security type per size (issue 19 item 21)."""

from __future__ import annotations

import base64
import gzip
import random
import string

import pytest

from gpufleet.components.azure.customdata import CustomDataTooLarge, encode_custom_data
from tests.components.stackplans import plan

VM = "azure-native:compute:VirtualMachine"

# Read 2026-11-25. OSProfile (learn.microsoft.com/rest/api/compute/virtual-machines/create-or-
# update#osprofile): customData "can't be updated" once the VM exists and "the maximum length
# of the binary array is 65535 bytes": the decoded data; ARM takes it base64, and refuses more
# with "...exceeds the maximum length of 87380 characters" (the base64 of 65535 bytes:
# 4 * 65535 / 3 = 87380). ImageReference cannot change on an existing VM
# either (a new image means a new VM). ARM answers such a PUT with 409
# PropertyChangeNotAllowed.
IMMUTABLE = {"osProfile.customData", "storageProfile.imageReference"}
CUSTOM_DATA_LIMIT = 65535  # bytes, decoded
CUSTOM_DATA_BASE64_LIMIT = 87380  # characters
# cloud-init docs, "User data formats": gzip-compressed content is detected and uncompressed.
GZIP_MAGIC = b"\x1f\x8b"
# BootDiagnostics (same API): "If storageUri is not specified while enabling boot diagnostics,
# managed storage will be used."
# Trusted Launch (azure-compute-docs articles/virtual-machines/trusted-launch.md, "Virtual
# machines sizes", GPU row): the ND family is supported, NDasrA100_v4 and NDm_A100_v4 are
# "currently not supported".
TRUSTED_LAUNCH = {"azure-nd-h100": True, "azure-nd-a100": False}
# "Delete a VM and attached resources" (learn.microsoft.com/azure/virtual-machines/delete):
# with deleteOption "Delete" on the NIC reference, deleting the VM deletes its NIC; "Detach"
# keeps it.
NIC_DELETE_OPTION_KEEPS = {"Delete": False, "Detach": True}


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_an_immutable_change_replaces_the_vm_deleting_it_first(stack):
    """A TTL, recipe or image change would make a plain `pulumi up` fail with 409: Pulumi
    replaces the VM instead, the old one deleted first (two ND VMs at once would need twice
    the GPU quota)."""
    for vm in plan(stack).of_type(VM):
        assert set(vm.replace_on_changes) >= IMMUTABLE
        assert vm.delete_before_replace is True
        # The new VM attaches the same NIC resource: deleting the old VM must not take it.
        (ref,) = vm.inputs["networkProfile"]["networkInterfaces"]
        assert NIC_DELETE_OPTION_KEEPS[ref["deleteOption"]]


def test_custom_data_is_gzipped_and_far_under_the_limit():
    p = plan("azure-nd-h100")
    for vm in p.of_type(VM):
        sent = vm.inputs["osProfile"]["customData"]
        raw = base64.b64decode(sent)
        assert raw[:2] == GZIP_MAGIC
        assert gzip.decompress(raw).decode().startswith("#cloud-config")
        assert len(raw) < CUSTOM_DATA_LIMIT // 2


def test_custom_data_over_the_limit_is_refused_naming_its_size():
    noise = "".join(random.Random(7).choices(string.ascii_letters, k=100_000))
    with pytest.raises(CustomDataTooLarge) as e:
        encode_custom_data("#cloud-config\n" + noise)
    size = len(gzip.compress(("#cloud-config\n" + noise).encode(), mtime=0))
    assert size > CUSTOM_DATA_LIMIT
    assert f"{size} bytes" in str(e.value) and str(CUSTOM_DATA_LIMIT) in str(e.value)
    assert e.value.hint


def test_custom_data_is_measured_decoded_not_as_its_base64():
    """Gzipped cloud-init of 64,149 bytes is 85,532 base64 characters: under both of ARM's
    limits, so it must be sent, not refused for its base64 length."""
    text = "#cloud-config\n" + "".join(random.Random(7).choices(string.ascii_letters, k=88_000))
    sent = encode_custom_data(text)
    assert len(base64.b64decode(sent)) <= CUSTOM_DATA_LIMIT
    assert CUSTOM_DATA_LIMIT < len(sent) <= CUSTOM_DATA_BASE64_LIMIT


def test_custom_data_is_the_same_for_the_same_text():
    """gzip stamps the time unless told not to: the same recipe must not look like a change."""
    assert encode_custom_data("#cloud-config\n") == encode_custom_data("#cloud-config\n")


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_boot_diagnostics_on_with_managed_storage(stack):
    for vm in plan(stack).of_type(VM):
        boot = vm.inputs["diagnosticsProfile"]["bootDiagnostics"]
        assert boot["enabled"] is True and "storageUri" not in boot


@pytest.mark.parametrize("stack", sorted(TRUSTED_LAUNCH))
def test_trusted_launch_is_pinned_where_the_size_supports_it(stack):
    """Secure Boot stays off: it refuses an unsigned kernel module, and a DKMS-built NVIDIA
    driver is one (azure-compute-docs trusted-launch.md, note on CUDA drivers)."""
    for vm in plan(stack).of_type(VM):
        profile = vm.inputs.get("securityProfile")
        if TRUSTED_LAUNCH[stack]:
            assert profile["securityType"] == "TrustedLaunch"
            assert profile["uefiSettings"] == {"secureBootEnabled": False, "vTpmEnabled": True}
        else:
            assert profile is None


# Trusted Launch on existing VMs (learn.microsoft.com/azure/virtual-machines/trusted-launch-
# existing-vm, read 2026-11-25): the security type of an existing VM changes only while it is
# deallocated ("Deallocate the VM" before "Update the security type"); ARM refuses the PUT on
# a running VM.
SECURITY_TYPE_NEEDS_DEALLOCATED = "securityProfile"


@pytest.mark.parametrize("stack", ["azure-nd-a100", "azure-nd-h100"])
def test_a_security_type_change_replaces_the_vm_instead_of_failing(stack):
    """A size change between a Trusted Launch size and one without it changes the security
    type: a plain update would fail on the running VM; the VM is replaced, deleted first."""
    from gpufleet.components.replacements import diff

    for vm in plan(stack).of_type(VM):
        assert SECURITY_TYPE_NEEDS_DEALLOCATED in vm.replace_on_changes
    old = {"type": VM, "name": "c-node-0", "inputs": {"securityProfile": None}}
    new = {
        "type": VM,
        "name": "c-node-0",
        "inputs": {"securityProfile": {"securityType": "TrustedLaunch"}},
    }
    (refused,) = diff([old], [new])
    assert refused.action == "refused"
    replace = {**new, "replace_on_changes": [SECURITY_TYPE_NEEDS_DEALLOCATED]}
    (change,) = diff([old], [replace])
    assert change.action == "replace"
