"""The outputs a plain-`pulumi` user reaches a fleet with: ssh_config, hostfile, head_address."""

from __future__ import annotations

import subprocess

import pytest

from gpufleet.components.contract import (
    OUTPUT_NAMES,
    head_address,
    hostfile_text,
    known_hosts_lines,
    ssh_config_text,
)
from gpufleet.components.fleet import GpufleetComponent

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGZha2Vob3N0a2V5Zm9yZ29sZGVudGVzdHNvbmx5"


def nodes(count: int = 3, *, bootstrap: bool = True, gpus: int = 8) -> list[dict]:
    """The `nodes` output as a GpuFleet registers it: head public, workers private only."""
    return [
        {
            "name": f"node-{i}",
            "private_ip": f"10.0.0.{10 + i}",
            "public_ip": "203.0.113.10" if i == 0 else None,
            "gpus": gpus,
            "host_key": KEY if bootstrap else "",
            "instance_id": f"i-{i:04d}",
            **({} if bootstrap else {"host_key_at": f"arn:aws:ec2:::instance/i-{i:04d}"}),
        }
        for i in range(count)
    ]


def test_the_new_outputs_are_in_the_contract_and_annotated_on_the_component():
    assert OUTPUT_NAMES[-3:] == ("ssh_config", "hostfile", "head_address")
    annotated = GpufleetComponent.__annotations__
    for name in OUTPUT_NAMES:
        assert name in annotated, f"{name}: no pulumi.Output annotation (schema output)"


@pytest.mark.parametrize("bootstrap", [True, False], ids=["pinned", "own-host-keys"])
def test_ssh_config_golden(golden, bootstrap):
    text = ssh_config_text("p5", "aws", "ubuntu", nodes(bootstrap=bootstrap))
    golden(f"contract/ssh_config-aws-3-{'pinned' if bootstrap else 'own'}.conf", text)


def test_ssh_config_reaches_workers_through_the_head_with_checked_host_keys():
    text = ssh_config_text("p5", "aws", "ubuntu", nodes())
    blocks = {b.splitlines()[0]: b for b in text.split("\n\n")[1:]}
    assert list(blocks) == ["Host p5 p5-node-0", "Host p5-node-1", "Host p5-node-2"]
    assert "HostName 203.0.113.10" in blocks["Host p5 p5-node-0"]
    assert "ProxyJump" not in blocks["Host p5 p5-node-0"]
    for worker in ("Host p5-node-1", "Host p5-node-2"):
        assert "ProxyJump p5-node-0" in blocks[worker]
    assert text.count("StrictHostKeyChecking yes") == 3
    assert "accept-new" not in text and "StrictHostKeyChecking no" not in text
    # the worker's HostName is the address known_hosts pins it under
    for n in nodes()[1:]:
        assert f"HostName {n['private_ip']}" in text
        assert f"{n['private_ip']} {KEY}" in known_hosts_lines(nodes())


def test_ssh_config_public_worker_is_reached_directly():
    ns = nodes(2)
    ns[1]["public_ip"] = "203.0.113.11"
    text = ssh_config_text("p5", "aws", "ubuntu", ns)
    assert "ProxyJump" not in text and "HostName 203.0.113.11" in text


def test_ssh_config_is_what_openssh_reads(tmp_path):
    """`ssh -G` (print the resolved config, connect nowhere) takes the file as written."""
    if subprocess.run(["which", "ssh"], capture_output=True).returncode:
        pytest.skip("no OpenSSH client")
    conf = tmp_path / "ssh_config"
    conf.write_text(ssh_config_text("p5", "aws", "ubuntu", nodes()))
    out = subprocess.run(
        ["ssh", "-G", "-F", str(conf), "p5-node-2"], capture_output=True, text=True, check=True
    ).stdout
    seen = dict(ln.split(" ", 1) for ln in out.splitlines() if " " in ln)
    assert seen["hostname"] == "10.0.0.12"
    assert seen["proxyjump"] == "p5-node-0"
    assert seen["user"] == "ubuntu"
    assert seen["stricthostkeychecking"] in ("true", "yes")


def test_hostfile_golden(golden):
    golden("contract/hostfile-aws-3x8.txt", hostfile_text(nodes()))


def test_hostfile_slots_are_never_zero():
    assert hostfile_text(nodes(2, gpus=0)) == "10.0.0.10 slots=1\n10.0.0.11 slots=1\n"


def test_head_address_is_the_public_one():
    assert head_address(nodes()) == "203.0.113.10"


def test_the_component_schema_lists_the_new_outputs_for_every_cloud():
    """What TypeScript/Go/YAML programs see (`pulumi package add`): schema outputs."""
    import json

    from pulumi.provider.experimental.component import ComponentProvider

    from gpufleet.components.aws.fleet import AwsGpuFleet
    from gpufleet.components.azure.fleet import AzureGpuFleet
    from gpufleet.components.gcp.fleet import GcpGpuFleet

    classes = [AwsGpuFleet, GcpGpuFleet, AzureGpuFleet]
    schema = json.loads(ComponentProvider(classes, "gpufleet").schema)
    for cls in classes:
        props = schema["resources"][f"gpufleet:index:{cls.__name__}"]["properties"]
        for name in ("sshConfig", "hostfile", "headAddress"):
            assert props[name]["type"] == "string", (cls.__name__, name)


def test_the_key_recipe_never_leaves_the_key_readable_and_says_what_own_keys_need():
    """`> f && chmod 600 f` creates the key file with the umask's mode (0644 by default) until
    the chmod; `(umask 077; ... > f)` creates it 0600. With nodes that made their own host keys,
    the header says ssh refuses them until they are pinned, and how."""
    own = ssh_config_text("c", "aws", "ubuntu", nodes(bootstrap=False))
    assert (
        "(umask 077; pulumi stack output ssh_private_key --show-secrets > ~/.ssh/gpufleet-c)" in own
    )
    assert "chmod" not in own
    assert "StrictHostKeyChecking yes)" in own and "gpufleet attach NAME --stack STACK" in own
    assert "host_key_at" in own
