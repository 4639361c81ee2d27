"""attach below the CLI: a stack's outputs become a record; refusals first; down forgets only."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet.clusters import attach, ops
from gpufleet.components.contract import (
    CLUSTER_OUTPUTS,
    OUTPUT_NAMES,
    head_address,
    hostfile_text,
    known_hosts_lines,
    ssh_config_text,
)
from gpufleet.core import state
from gpufleet.core.errors import ClusterExists, GpufleetError
from gpufleet.provision.hostkeypin import HostKeysUnpublished
from gpufleet.remote.sshkeys import generate_ed25519

USER_KEY = generate_ed25519("t-user").private_openssh
HOST_KEYS = [" ".join(generate_ed25519(f"h{i}").public_openssh.split()[:2]) for i in range(3)]
ARN = "arn:aws:ec2:us-east-1:123456789012:instance/i-0{:016x}"


def outputs(n: int = 2, *, own_keys: bool = False, **over) -> dict:
    """A GpuFleet stack's outputs, as `pulumi stack output --json --show-secrets` prints them."""
    nodes = [
        {
            "name": f"node-{i}",
            "private_ip": f"10.0.0.{10 + i}",
            "public_ip": "203.0.113.10" if i == 0 else None,
            "gpus": 8,
            "host_key": "" if own_keys else HOST_KEYS[i],
            "instance_id": f"i-0{i:016x}",
            **({"host_key_at": ARN.format(i)} if own_keys else {}),
        }
        for i in range(n)
    ]
    out = {
        "cluster_name": "p5",
        "cloud": "aws",
        "instance_type": "p5.48xlarge",
        "fabric": "efa",
        "ssh_user": "ubuntu",
        "ssh_private_key": USER_KEY,
        "nodes": nodes,
        "known_hosts": known_hosts_lines(nodes),
        "expires_at": int(time.time()) + 3600,
        "ssh_config": ssh_config_text("p5", "aws", "ubuntu", nodes),
        "hostfile": hostfile_text(nodes),
        "head_address": head_address(nodes),
    }
    assert tuple(out) == OUTPUT_NAMES
    return {**out, **over}


def console(i: int) -> str:
    """EC2 console output with cloud-init's keys_to_console block for node i."""
    return (
        f"boot...\n-----BEGIN SSH HOST KEY KEYS-----\n{HOST_KEYS[i]} root@ip\n"
        "-----END SSH HOST KEY KEYS-----\n"
    )


def quiet(_m: str) -> None:
    pass


def test_the_record_is_what_up_records_marked_adopted_without_rotation():
    info = attach.attach("mine", outputs(), quiet, source={"stack": "dev", "cwd": "/proj"})
    saved = state.load("mine")
    assert saved == info
    assert (info.name, info.cloud, info.fabric, info.ssh_user) == ("mine", "aws", "efa", "ubuntu")
    assert [n.host_key for n in info.nodes] == HOST_KEYS[:2]
    assert info.provider["adopted"] and info.provider["stack"] == "dev"
    assert info.provider["cluster_name"] == "p5"
    assert info.host_key_rotation is None  # the stack's outputs pin these keys for others too
    key = Path(info.ssh_key_path)
    assert key.read_text() == USER_KEY and key.stat().st_mode & 0o777 == 0o600
    assert Path(info.known_hosts_path).read_text() == outputs()["known_hosts"]
    conf = (state.cluster_dir("mine") / "ssh_config").read_text()
    assert "Host mine mine-node-0" in conf and "ProxyJump mine-node-0" in conf


def test_nodes_that_made_their_own_keys_are_pinned_from_the_channel_as_up_does():
    asked: list[list[str]] = []

    def call(argv: list[str]) -> tuple[bool, str]:
        asked.append(argv)
        i = int(argv[3].removeprefix("--instance-id=i-0"), 16)
        return True, console(i)

    info = attach.attach(
        "mine",
        outputs(own_keys=True),
        quiet,
        source={"outputs": "o.json"},
        which=lambda tool: f"/usr/bin/{tool}",
        call=call,
        sleep=lambda _s: None,
    )
    assert sorted(a[3] for a in asked) == [
        "--instance-id=i-00000000000000000",
        "--instance-id=i-00000000000000001",
    ]
    assert [n.host_key for n in info.nodes] == HOST_KEYS[:2]
    assert not any(n.bootstrap_host_key for n in info.nodes)
    kh = Path(info.known_hosts_path).read_text()
    assert f"203.0.113.10 {HOST_KEYS[0]}" in kh and f"10.0.0.11 {HOST_KEYS[1]}" in kh
    assert state.load("mine").nodes[1].host_key == HOST_KEYS[1]


def test_no_cloud_cli_refuses_before_anything_is_written():
    with pytest.raises(HostKeysUnpublished) as e:
        attach.attach("mine", outputs(own_keys=True), quiet, source={}, which=lambda _t: None)
    assert "aws is not on PATH" in str(e.value) and "AWS CLI" in e.value.hint
    assert not state.known("mine")


def test_a_channel_that_never_answers_leaves_nothing():
    clock = iter(range(0, 10_000, 100))
    with pytest.raises(HostKeysUnpublished):
        attach.attach(
            "mine",
            outputs(own_keys=True),
            quiet,
            source={},
            which=lambda t: t,
            call=lambda _a: (False, "AccessDenied"),
            sleep=lambda _s: None,
            clock=lambda: float(next(clock)),
        )
    assert not state.known("mine")


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"ssh_private_key": "[secret]"}, "--show-secrets"),
        ({"cloud": "local"}, "AwsGpuFleet"),
        ({"expires_at": 1_000}, "ttl_minutes"),
    ],
)
def test_outputs_gpufleet_cannot_use_are_refused(bad, says):
    with pytest.raises(GpufleetError) as e:
        attach.attach("mine", outputs(**bad), quiet, source={"outputs": "o.json"})
    assert says in e.value.hint
    assert not state.known("mine")


def test_a_stack_of_another_program_names_what_it_lacks():
    other = {"vpcId": "vpc-1", "cluster_name": "x"}
    with pytest.raises(GpufleetError) as e:
        attach.attach("mine", other, quiet, source={"stack": "web"})
    assert "stack web has no GpuFleet outputs: it lacks cloud" in str(e.value)
    assert "pulumi.export" in e.value.hint


def test_a_stack_made_before_the_new_outputs_still_attaches():
    old = {k: v for k, v in outputs().items() if k in CLUSTER_OUTPUTS}
    assert attach.attach("mine", old, quiet, source={}).head.public_ip == "203.0.113.10"


def test_reattach_replaces_an_adopted_record_never_one_gpufleet_made():
    attach.attach("mine", outputs(2), quiet, source={})
    assert len(attach.attach("mine", outputs(3), quiet, source={}).nodes) == 3
    made = state.load("mine").model_copy(update={"name": "made", "provider": {"stack": "made"}})
    state.save(made)
    with pytest.raises(ClusterExists):
        attach.attach("made", outputs(), quiet, source={})
    assert not state.load("made").provider.get("adopted")


def test_down_forgets_an_adopted_cluster_and_never_destroys_its_stack(monkeypatch):
    def no_provisioner(*_a, **_k):
        raise AssertionError("down of an adopted cluster reached the provisioner")

    monkeypatch.setattr(ops, "for_cloud", no_provisioner)
    attach.attach("mine", outputs(), quiet, source={"stack": "dev", "cwd": "/proj"})
    said: list[str] = []
    assert ops.destroy_name("mine", said.append)
    assert not state.known("mine") and state.was_removed("mine")
    assert "`pulumi destroy --stack dev` in /proj" in said[-1]


def test_a_bad_name_is_refused():
    with pytest.raises(GpufleetError):
        attach.attach("Not/A/Name", outputs(), quiet, source={})
    assert not os.path.exists(state.home() / "clusters" / "Not")


def test_extend_of_an_adopted_cluster_is_refused_and_touches_nothing(monkeypatch):
    """gpufleet changes nothing on nodes it did not create: no new expiry over SSH, none in the
    stack; the record keeps the stack's expiry, and the fix is the stack owner's."""

    def no_provisioner(*_a, **_k):
        raise AssertionError("extend of an adopted cluster reached the provisioner")

    monkeypatch.setattr(ops, "for_cloud", no_provisioner)
    info = attach.attach("mine", outputs(), quiet, source={"stack": "dev", "cwd": "/proj"})
    with pytest.raises(GpufleetError) as e:
        ops.extend("mine", 120)
    assert "cannot extend 'mine'" in e.value.message and "did not create" in e.value.message
    assert "ttl_minutes" in e.value.hint and "gpufleet attach mine" in e.value.hint
    assert e.value.exit_code == 2
    assert state.load("mine").expires_at == info.expires_at


def test_the_outputs_a_yaml_program_exports_attach(monkeypatch):
    """examples/pulumi-yaml's `outputs:` evaluated over what the package returns for its fleet
    (schema names, camelCase, as a YAML/TypeScript/Go/C# stack holds them): attach maps them
    to the contract and records the same cluster a Python stack's outputs give."""
    import re

    import yaml

    from tests.package.helpers import YAML_PROGRAM, construct

    doc = yaml.safe_load(YAML_PROGRAM.read_text())
    [(name, res)] = doc["resources"].items()
    _, fleet = construct(res["type"], name, res["properties"])
    exported = {}
    for key, expr in doc["outputs"].items():
        m = re.fullmatch(r"\$\{" + name + r"\.(\w+)\}", expr)
        assert m, f"output {key}: {expr} is not one of the fleet's outputs"
        exported[key] = fleet[m.group(1)]
    assert "ssh_private_key" not in exported and "sshPrivateKey" in exported  # schema names
    ids = [n["instanceId"] for n in exported["nodes"]]
    arns = [n["hostKeyAt"].rsplit("/", 1)[-1] for n in exported["nodes"]]  # where keys are read

    def call(argv: list[str]) -> tuple[bool, str]:  # EC2 console output of each instance
        return True, console(arns.index(argv[3].removeprefix("--instance-id=")))

    # under mocks the fleet was created at epoch 0 (components/expiry.py): attach an hour later
    clock = SimpleNamespace(time=lambda: 3600.0, strftime=time.strftime, gmtime=time.gmtime)
    monkeypatch.setattr(attach, "time", clock)
    info = attach.attach(
        "yaml",
        exported,
        quiet,
        source={"stack": "dev"},
        which=lambda tool: f"/usr/bin/{tool}",
        call=call,
        sleep=lambda _s: None,
    )
    assert (info.name, info.cloud, info.instance_type) == ("yaml", "aws", "p5.48xlarge")
    assert info.provider["cluster_name"] == "yaml-p5" and info.fabric == exported["fabric"]
    assert info.ssh_user == exported["sshUser"]
    assert info.expires_at == float(exported["expiresAt"])
    nodes = exported["nodes"]
    assert [n.private_ip for n in info.nodes] == [n["privateIp"] for n in nodes]
    assert [n.instance_id for n in info.nodes] == ids
    assert info.head.public_ip == nodes[0]["publicIp"] and info.nodes[1].public_ip is None
    assert [n.host_key for n in info.nodes] == HOST_KEYS[:2]  # read where hostKeyAt says
    assert Path(info.ssh_key_path).read_text().strip() == exported["sshPrivateKey"].strip()


def test_camel_case_names_map_to_the_contract_and_snake_case_wins():
    got = attach.contract_names(
        {"sshPrivateKey": "k", "known_hosts": "a", "knownHosts": "b", "nodes": [{"hostKeyAt": "x"}]}
    )
    assert got["ssh_private_key"] == "k" and got["known_hosts"] == "a"
    assert got["nodes"][0]["host_key_at"] == "x"
