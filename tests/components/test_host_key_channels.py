"""No private host key in any cloud node's user data: nodes make their own and publish them."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.preview import Plan, evaluate

STACKS = sorted(
    p.name[len("Pulumi.") : -len(".yaml")] for p in Path("stacks").glob("Pulumi.*.yaml")
)

# Where each cloud hands a VM its cloud-init, from the providers' docs (read 2026-11-25):
# EC2 launch template userData, base64 (gpufleet gzips it first; cloud-init reads gzip):
#   https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_RequestLaunchTemplateData.html
# GCE instance metadata key "user-data" (cloud-init's GCE datasource):
#   https://cloudinit.readthedocs.io/en/latest/reference/datasources/gce.html
# Azure osProfile.customData, base64:
#   https://learn.microsoft.com/azure/virtual-machines/custom-data
# and the metadata / tags every other resource carries, read as a whole.


def _unpack(b64: str) -> str:
    raw = base64.b64decode(b64)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def user_data_texts(p: Plan) -> list[str]:
    """Every node's cloud-init, decoded, and every other input of the plan as JSON."""
    texts = []
    for r in p.resources:
        ins = r.inputs
        if r.type == "aws:ec2/launchTemplate:LaunchTemplate":
            texts.append(_unpack(ins["userData"]))
        elif r.type == "gcp:compute/instance:Instance":
            texts.append(ins["metadata"]["user-data"])
        elif r.type == "azure-native:compute:VirtualMachine":
            texts.append(_unpack(ins["osProfile"]["customData"]))
    return texts


def _plan(stack: str, config: dict[str, str] | None = None) -> Plan:
    raw = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(raw, stack=stack)
    return evaluate(
        lambda: stackconfig.exports(stackconfig.build(spec, expires_at=1_900_000_000)),
        config={**stackconfig.pulumi_config(raw), **(config or {})},
        stack=stack,
    )


@pytest.mark.parametrize("stack", STACKS)
def test_no_private_host_key_in_user_data_metadata_or_custom_data(stack):
    """Issue 19 item 23: user data is readable from the metadata service and by whoever may
    describe the instance; a stack made with plain `pulumi up` and never contacted kept each
    node's bootstrap private host key there. Each node now makes its own."""
    p = _plan(stack)
    texts = user_data_texts(p)
    assert len(texts) == len(p.outputs["nodes"]) and all("#cloud-config" in t for t in texts)
    assert not [t for t in texts if "PRIVATE KEY" in t]
    everything = json.dumps([r.inputs for r in p.resources], default=str)
    assert "PRIVATE KEY" not in everything
    hosts = [r.name for r in p.of_type("tls:index/privateKey:PrivateKey") if "host" in r.name]
    assert hosts == []  # the stack holds no host key either
    for t in texts:
        assert "emit_keys_to_console: true" in t


@pytest.mark.parametrize("stack", STACKS)
def test_each_node_says_where_it_publishes_its_key_in_a_form_the_cli_reads(stack):
    from gpufleet.provision.hostkeychannels import channel

    p = _plan(stack)
    ch = channel(p.outputs["cloud"])
    assert ch is not None
    vms = {r.name for r in p.of_type("azure-native:compute:VirtualMachine")}
    for n in p.outputs["nodes"]:
        assert n["host_key"] == ""
        if vms:  # the VM's resource id, an ARM id in Azure (the mocks answer "<name>-id")
            assert n["host_key_at"].removesuffix("-id") in vms
            continue
        argv: list[Any] = ch.command(n["host_key_at"])  # raises on a reference it cannot read
        assert argv[0] == ch.tool


@pytest.mark.parametrize("stack", ["aws-p4d", "gcp-a2", "azure-nd-a100"])
def test_bootstrap_host_keys_config_keeps_the_old_path(stack):
    """GPUFLEET_HOST_KEYS=bootstrap (no cloud CLI here): the stack makes each node's key, its
    user data carries it, first contact replaces it (remote/hostkeys.py); on GCP the guest agent
    is told not to regenerate it."""
    p = _plan(stack, {"gpufleet:bootstrapHostKeys": "true"})
    texts = user_data_texts(p)
    assert texts
    for t in texts:  # in registration order, which is not the nodes' order
        i = re.search(r"# gpufleet node node-(\d+) ", t).group(1)
        assert f"MOCK-{stack}-node-{i}-host-key" in t and "ssh_keys:" in t
        assert ("set_host_keys = false" in t) == stack.startswith("gcp")
    assert all(n["host_key"] and "host_key_at" not in n for n in p.outputs["nodes"])
    assert p.outputs["known_hosts"].strip()
