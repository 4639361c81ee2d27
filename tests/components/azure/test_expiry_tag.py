"""Azure: a node reads its hard expiry from its own VM tag through IMDS, so a TTL change
re-tags the VMs in place instead of replacing them (issue 19 items 5/21)."""

from __future__ import annotations

import base64
import gzip
from typing import Any

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.preview import Plan, evaluate
from tests.components.stackplans import plan
from tests.images.test_steps import expire, make_node, prebake

VM = "azure-native:compute:VirtualMachine"
TAG = "gpufleet-expires"
# Read 2026-11-25:
# - learn.microsoft.com/dotnet/api/azure.resourcemanager.computeschedule.models.
#   virtualmachineosprofile.customdata (the ARM osProfile.customData property): "This property
#   cannot be updated after the VM is created" (so a change makes a new VM).
IMMUTABLE = "osProfile.customData"
# - learn.microsoft.com/azure/virtual-machines/instance-metadata-service: GET
#   /metadata/instance/compute/tagsList?api-version=2021-02-01 with header Metadata:true;
#   tagsList is a JSON array of {"name": ..., "value": ...}.
IMDS = {
    "url": "169.254.169.254/metadata/instance/compute/tagsList?api-version=2021-02-01",
    "header": "Metadata:true",
}


def _plan_ttl(ttl: int) -> Plan:
    """The stack with its expiry from the stack's own state (components/expiry.py), as a
    plain `pulumi up` has it: the TTL reaches the nodes only through that."""
    config = stackconfig.stack_config("azure-nd-h100")
    spec = stackconfig.spec_from_config(config, stack="azure-nd-h100").with_(ttl_minutes=ttl)

    def program() -> Any:
        return stackconfig.exports(stackconfig.build(spec))

    return evaluate(program, config=stackconfig.pulumi_config(config), stack="azure-nd-h100")


def _vms(p: Plan) -> dict[str, Any]:
    return {vm.name: vm.inputs for vm in p.of_type(VM)}


def test_a_ttl_change_changes_no_vms_custom_data_only_its_tag():
    a, b = _vms(_plan_ttl(240)), _vms(_plan_ttl(480))
    assert a.keys() == b.keys() and a
    section, key = IMMUTABLE.split(".")
    for name in a:
        assert a[name][section][key] == b[name][section][key], name
        assert a[name]["tags"][TAG] == str(240 * 60)
        assert b[name]["tags"][TAG] == str(480 * 60)


def test_the_custom_data_names_the_tag_and_carries_no_expiry():
    for vm in plan("azure-nd-h100").of_type(VM):
        text = gzip.decompress(base64.b64decode(vm.inputs["osProfile"]["customData"])).decode()
        assert "GPUFLEET_EXPIRES_AT=''" in text
        assert f"GPUFLEET_EXPIRY_TAG={TAG}" in text
        assert "/usr/local/sbin/gpufleet-expire" in text  # the timer is still armed


def _fake_imds(node: Any, body: str, rc: int = 0) -> None:
    (node.bin / "curl").write_text(
        f'#!/bin/sh\necho "curl $*" >> {node.calls}\n'
        f"case \"$*\" in *compute/tagsList*) printf %s '{body}'; exit {rc} ;; esac\n"
    )
    (node.bin / "jq").write_text("#!/bin/sh\nexit 127\n")  # a custom image without jq
    (node.bin / "jq").chmod(0o755)


def _tags(value: str) -> str:
    return (
        '[{"name":"gpufleet-cluster","value":"c"},'
        f'{{"name":"{TAG}","value":"{value}"}},{{"name":"owner","value":"9"}}]'
    )


@pytest.mark.parametrize(
    ("answer", "removed"), [("1000", True), ("1900000000", False), ("", False)]
)
def test_the_expiry_script_goes_at_the_tag_azure_imds_answers(tmp_path, answer, removed):
    node = prebake(make_node(tmp_path, "azure", "Standard_ND96isr_H100_v5"))
    node.set_env(GPUFLEET_EXPIRES_AT="", GPUFLEET_EXPIRY_TAG=TAG, GPUFLEET_ARM_PATIENCE="0")
    _fake_imds(node, _tags(answer))
    r = expire(node)
    calls = node.recorded()
    assert f"-H {IMDS['header']} http://{IMDS['url']}" in calls
    assert ("expired at" in r.stderr) == removed, r.stderr
    assert "systemctl poweroff" not in calls  # Azure never powers off (a Stopped VM bills)


def test_a_failed_read_keeps_the_last_tag_and_a_never_read_one_is_said_once(tmp_path):
    node = prebake(make_node(tmp_path, "azure", "Standard_ND96isr_H100_v5"))
    node.set_env(GPUFLEET_EXPIRES_AT="", GPUFLEET_EXPIRY_TAG=TAG, GPUFLEET_ARM_PATIENCE="0")
    _fake_imds(node, "", rc=22)  # IMDS not answering
    first, second = expire(node), expire(node)
    assert "will not expire by itself" in first.stderr, first.stderr
    assert "will not expire by itself" not in second.stderr  # once
    _fake_imds(node, _tags("1000"))
    runs = [expire(node)]  # past: goes
    assert "expired at 1000" in runs[0].stderr, runs[0].stderr
    _fake_imds(node, _tags("1900000000"))
    runs = [expire(node)]
    _fake_imds(node, "", rc=22)  # IMDS down again: the last answer stands
    runs.append(expire(node))
    assert (node.root / "var/lib/gpufleet/expires_tag").read_text().strip() == "1900000000"
    assert "expired at" not in "".join(r.stderr for r in runs)
