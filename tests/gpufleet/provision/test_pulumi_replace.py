"""PulumiProvisioner.replace: only the lost nodes' own resources go to `pulumi up`.

Real: each cloud's fleet program (the one replace() hands the Automation API), run under
Pulumi mocks; the URNs and parents the SDK registers; components/nodeurns.py; the cluster
record, known_hosts and ssh config written under a temporary $GPUFLEET_HOME.
Faked: the Pulumi engine and CLI (a FakeStack records stack.up's arguments, answers
export_stack with the mock run's registrations, and gives the replaced instances new
addresses as a cloud would), the cloud's host-key channel and the SSH wait.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pulumi
import pytest

import gpufleet.provision.pulumi as pp
from gpufleet.components import stackconfig
from gpufleet.components.contract import cluster_info_from_outputs
from gpufleet.components.nodeurns import urn_name
from gpufleet.components.preview import fake_public_key
from gpufleet.core import state
from tests.components.stackurns import run_spec

STACKS = {
    "aws": ("aws-p5", {"gpufleet:bootstrapHostKeys": "true"}),
    "gcp": ("gcp-a3", {}),
    "azure": ("azure-nd-h100", {}),
}
CIDR = "203.0.113.7/32"


def mock_run(spec, conf, program=None):
    """(registered, outputs) of the program under mocks; `program` replaces the fleet's own
    with the one replace() built (its pulumi.export calls are collected)."""
    if program is None:
        registered, outputs, _ = run_spec(spec, conf)
        return registered, outputs
    exported: dict[str, Any] = {}
    real_export = pulumi.export
    pulumi.export = lambda k, v: exported.__setitem__(k, v)  # type: ignore[assignment]
    try:
        registered, outputs, _ = run_spec(spec, conf, program=program, exported=exported)
    finally:
        pulumi.export = real_export
    return registered, outputs


ENGINE_MISSING = "error: one or more targets could not be found in the stack"


class FakeStack:
    """The engine's side: export_stack lists the state (what the first `up` registered);
    refresh() drops the URNs in `gone` from it (an instance the cloud deleted, as a provider
    read finds no such resource); up() (after that same refresh where refresh=True) refuses a
    `replace` URN not in the state as the engine does (pulumi/pulumi
    pkg/resource/deploy/deployment_executor.go at 1b59498, read 2026-11-25: `up --refresh`
    refreshes first, rebuildBaseState drops what the provider no longer finds, then
    checkTargets(ReplaceTargets) fails for a replace URN not in that state; a --target URN
    may be one the run creates),
    records its arguments, raises the next of `fail` while any are left, runs the given
    program under mocks and answers its outputs with the remade nodes at new addresses: a new
    instance id for each instance replaced or created anew, a new private IP too unless the
    node's interface (an ENI / NIC of its own) was kept."""

    def __init__(self, registered, spec, conf, program, fail=(), gone=()):
        self.name = spec.name
        self.registered, self.spec, self.conf, self.program = registered, spec, conf, program
        self.state = list(registered)
        self.fail, self.gone = list(fail), set(gone)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.ups: list[dict[str, Any]] = []
        self.config: dict[str, str] = {}

    def set_config(self, key, value):
        self.config[key] = value.value

    def get_all_config(self):
        return {}

    def export_stack(self):
        return SimpleNamespace(deployment={"resources": list(self.state)})

    def refresh(self, **kw):
        self.calls.append(("refresh", kw))
        targets = set(kw["target"])
        self.state = [r for r in self.state if not (r["urn"] in targets and r["urn"] in self.gone)]

    def up(self, **kw):
        self.calls.append(("up", kw))
        self.ups.append(kw)
        if kw.get("refresh"):  # the engine refreshes the targets first, then checks them
            self.state = [r for r in self.state if r["urn"] not in self.gone & set(kw["target"])]
        present = {r["urn"] for r in self.state}
        if any(u not in present for u in kw.get("replace") or []):
            raise RuntimeError(ENGINE_MISSING)
        remade = set(kw.get("replace") or []) | (set(kw["target"]) - present)
        if self.fail:
            # delete_before_replace: the old instance went before the create failed
            self.state = [r for r in self.state if r["urn"] not in remade]
            raise self.fail.pop(0)
        _, outputs = mock_run(self.spec, self.conf, self.program)
        remade_names = {urn_name(u) for u in remade}
        names = {urn_name(r["urn"]) for r in self.registered}
        for i, n in enumerate(outputs["nodes"]):
            node = f"{self.spec.name}-node-{i}"
            own = [f"{node}-{k}" for k in ("eni", "nic") if f"{node}-{k}" in names]
            interface = own[0] if own else node
            if node in remade_names:
                n["instance_id"] = f"new-{i}"
                if n.get("host_key"):
                    n["host_key"] = fake_public_key(f"new-{i}")
            if interface in remade_names:
                n["private_ip"] = f"10.99.0.{i}"
        self.state = list(self.registered)
        return SimpleNamespace(outputs={k: SimpleNamespace(value=v) for k, v in outputs.items()})


def make_cluster(cloud: str, monkeypatch, fail=(), gone=()):
    """A recorded 4-node cluster of `cloud` whose nodes have pinned host keys, and the fake
    stack replace() will be given."""
    stack, extra = STACKS[cloud]
    conf = {**stackconfig.stack_config(stack), **extra}
    spec = stackconfig.spec_from_config(conf, stack=stack).with_(name="c4", nodes=4)
    spec = spec.with_(expires_at=1_900_000_000, ssh_cidrs=[CIDR])
    registered, outputs = mock_run(spec, conf)
    d = state.cluster_dir("c4")
    d.mkdir(parents=True, exist_ok=True)
    (d / "known_hosts").write_text("")
    info = cluster_info_from_outputs(
        outputs,
        ssh_key_path=str(d / "id_ed25519"),
        known_hosts_path=str(d / "known_hosts"),
        provider={
            "backend": "file:///nowhere",
            "stack": "c4",
            "zone": spec.zone,
            "ssh_cidrs": [CIDR],
        },
    )
    for n in info.nodes:  # as after first contact: each node's own key, pinned
        n.host_key, n.bootstrap_host_key = fake_public_key(f"old-{n.name}"), False
    state.save_spec(spec)
    state.save(info)
    stacks: list[FakeStack] = []

    def fake_stack(name, backend, program=None, **_):
        gone_urns = {r["urn"] for r in registered if urn_name(r["urn"]) in gone}
        stacks.append(FakeStack(registered, spec, conf, program, fail, gone_urns))
        return stacks[-1]

    waited: list[list[str]] = []
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "my-gcp-project")  # where `up` found it
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda *_: None)
    monkeypatch.setattr(pp, "_existing_stack", fake_stack)
    monkeypatch.setattr(pp, "_stack", lambda *a, **k: pytest.fail("a stack would be made"))
    monkeypatch.setattr(
        pp.hostkeypin,
        "read_keys",
        lambda c, at, *a, **kw: {n: fake_public_key(f"pub-{n}") for n in at},
    )
    monkeypatch.setattr(pp.hostkeypin, "require_channel", lambda cloud: None)  # its CLI is here
    monkeypatch.setattr(pp, "wait_for_ssh", lambda i, nodes, p: waited.append(nodes))
    return info, registered, stacks, waited


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_replacing_node_1_ups_only_its_own_resources(gpufleet_home, monkeypatch, cloud):
    info, registered, stacks, waited = make_cluster(cloud, monkeypatch)
    before = {n.name: n for n in info.nodes}
    lines: list[str] = []
    new = pp.PulumiProvisioner(policy=False).replace(info, ["node-1"], lines.append)

    [stack] = stacks
    [call] = stack.ups
    # what names node-1 (its instance, c4-node-1-*), straight from the registrations
    mine = sorted(
        r["urn"]
        for r in registered
        if urn_name(r["urn"]) in ("c4-node-1",) or urn_name(r["urn"]).startswith("c4-node-1-")
    )
    # its NIC (Azure; deleteOption Detach) outlives the VM: targeted, not replaced
    kept = {u for u in mine if urn_name(u) == "c4-node-1-nic"}
    assert (cloud == "azure") == bool(kept)
    assert call["replace"] == sorted(set(mine) - kept) and call["target"] == mine
    assert "refresh" not in call  # refreshed first, on its own (below)
    assert [(op, kw["target"]) for op, kw in stack.calls] == [("refresh", mine), ("up", mine)]
    assert any(urn_name(u) == "c4-node-1" for u in mine)
    assert len(mine) < len(registered) / 4  # nothing shared, nothing of node-0/2/3
    # the record: node-1 anew, the others exactly as pinned before
    # a kept NIC keeps its address (Azure); elsewhere the new instance has a new one
    ip = before["node-1"].private_ip if kept else "10.99.0.1"
    assert new.node("node-1").private_ip == ip
    assert new.node("node-1").instance_id == "new-1"
    assert new.node("node-1").host_key != before["node-1"].host_key
    for name in ("node-0", "node-2", "node-3"):
        assert new.node(name) == before[name]
    assert state.load("c4") == new
    with open(new.known_hosts_path) as f:
        known = f.read()
    assert f"{ip} {new.node('node-1').host_key}" in known
    assert before["node-2"].host_key in known and before["node-1"].host_key not in known
    assert waited == [["node-1"]]
    assert any("replacing node-1" in m for m in lines)
    # the program ran with the config `up` gave it: same provider region, same host keys
    assert stack.config["gpufleet:bootstrapHostKeys"] == ("true" if cloud == "aws" else "false")
    assert set(stack.config) > {"gpufleet:bootstrapHostKeys"}


def test_a_name_not_in_the_cluster_is_refused_before_anything_runs(gpufleet_home, monkeypatch):
    info, _, stacks, waited = make_cluster("gcp", monkeypatch)
    monkeypatch.setattr(pp, "find_pulumi", lambda: pytest.fail("the CLI was looked for"))
    with pytest.raises(pp.UnknownNodes) as e:
        pp.PulumiProvisioner(policy=False).replace(info, ["node-1", "node-7"], print)
    assert "no node node-7" in str(e.value) and "node-0, node-1, node-2, node-3" in e.value.hint
    assert e.value.exit_code == 2
    assert stacks == [] and waited == []
    with pytest.raises(pp.UnknownNodes):
        pp.PulumiProvisioner(policy=False).replace(info, [], print)


def test_no_capacity_for_the_replacement_is_a_capacity_error_with_a_fix(gpufleet_home, monkeypatch):
    """GCE's ZONE_RESOURCE_POOL_EXHAUSTED (troubleshooting-resource-availability) on every
    try: the replacement stays in the cluster's zone and compact policy, so after the retries
    the fix named is a new placement for all nodes (--recover-mode relaunch)."""
    boom = Exception("error: googleapi: Error 503: ZONE_RESOURCE_POOL_EXHAUSTED")
    info, _, stacks, waited = make_cluster("gcp", monkeypatch, fail=[boom] * 3)
    slept: list[float] = []
    lines: list[str] = []
    prov = pp.PulumiProvisioner(policy=False, sleep=slept.append)
    with pytest.raises(pp.CapacityError) as e:
        prov.replace(info, ["node-2"], lines.append)
    assert e.value.replacing == ["node-2"] and e.value.zones == ["us-central1-a"]
    assert "to replace node-2 of c4 (3 tries" in e.value.message
    assert "other nodes are kept" in e.value.message
    assert "--recover-mode relaunch" in e.value.hint and "again later" in e.value.hint
    assert slept == [30.0, 60.0]
    assert len(stacks[0].ups) == 3
    assert sum("trying again in" in m for m in lines) == 2
    assert waited == [] and state.load("c4") == info  # the record is untouched


def test_capacity_refused_twice_then_found_replaces_the_node(gpufleet_home, monkeypatch):
    """EC2's InsufficientInstanceCapacity for the placement group twice, then capacity: the
    third try replaces node-2. The first failed try already deleted the old instance
    (delete_before_replace), so the retries refresh again and create it (target) rather than
    ask to replace a URN no longer in the state."""
    boom = Exception("error: creating EC2 Instance: InsufficientInstanceCapacity: ...")
    info, _, stacks, waited = make_cluster("aws", monkeypatch, fail=[boom, boom])
    slept: list[float] = []
    prov = pp.PulumiProvisioner(policy=False, capacity_waits_s=(1.0, 2.0), sleep=slept.append)
    new = prov.replace(info, ["node-2"], lambda _m: None)
    [stack] = stacks
    assert slept == [1.0, 2.0]
    assert [op for op, _ in stack.calls] == ["refresh", "up"] * 3
    assert any(urn_name(u) == "c4-node-2" for u in stack.ups[0]["replace"])
    assert not any(urn_name(u) == "c4-node-2" for u in stack.ups[2]["replace"])
    assert any(urn_name(u) == "c4-node-2" for u in stack.ups[2]["target"])
    assert new.node("node-2").instance_id == "new-2"
    assert waited == [["node-2"]]


def test_a_non_capacity_failure_is_not_retried(gpufleet_home, monkeypatch):
    boom = Exception("error: UnauthorizedOperation: not authorized to perform ec2:RunInstances")
    info, _, stacks, _ = make_cluster("aws", monkeypatch, fail=[boom])
    slept: list[float] = []
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner(policy=False, sleep=slept.append).replace(info, ["node-1"], print)
    assert not isinstance(e.value, pp.CapacityError)
    assert slept == [] and len(stacks[0].ups) == 1


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_an_instance_the_cloud_already_deleted_is_created_not_replaced(
    gpufleet_home, monkeypatch, cloud
):
    """The common case: node-1's Spot VM is gone (GCE instance_termination_action DELETE,
    Azure eviction policy Delete, EC2 one-time spot terminate). The refresh drops it from the
    state; `up --replace` of it would be refused by the engine (the fake's check), so only
    what is still there is replaced and the instance is created as a target."""
    info, registered, stacks, waited = make_cluster(cloud, monkeypatch, gone={"c4-node-1"})
    new = pp.PulumiProvisioner(policy=False).replace(info, ["node-1"], lambda _m: None)
    [stack] = stacks
    [call] = stack.ups
    names = {urn_name(u) for u in call["replace"]}
    assert "c4-node-1" not in names and names  # its other resources are still replaced
    assert "c4-node-1" in {urn_name(u) for u in call["target"]}
    assert new.node("node-1").instance_id == "new-1"
    assert waited == [["node-1"]]


def test_replacing_the_head_keeps_its_interface_and_address(gpufleet_home, monkeypatch):
    """p5's head has its own ENI (delete_on_termination false) with the Elastic IP: both
    targeted, neither replaced, so the new instance takes the same private and public
    address (the fake gives a new private IP only to a node whose interface was remade)."""
    info, _, stacks, _ = make_cluster("aws", monkeypatch)
    before = info.node("node-0").model_copy(deep=True)
    new = pp.PulumiProvisioner(policy=False).replace(info, ["node-0"], lambda _m: None)
    [call] = stacks[0].ups
    replaced = {urn_name(u) for u in call["replace"]}
    targeted = {urn_name(u) for u in call["target"]}
    assert "c4-node-0" in replaced
    assert {"c4-node-0-eni", "c4-node-0-eip"} <= targeted - replaced
    assert new.node("node-0").instance_id == "new-0"
    assert new.node("node-0").private_ip == before.private_ip
    assert new.node("node-0").public_ip == before.public_ip


# --- status: the provider plugins' view of each node's instance (a refresh preview) --------


def step(op: str, urn: str, outputs: dict | None):
    """An engine event as the Automation API hands it to on_event (pulumi/automation/events.py
    ResOutputsEvent: metadata.op, .urn, .new.outputs; new is absent for a gone resource)."""
    new = SimpleNamespace(outputs=outputs) if outputs is not None else None
    meta = SimpleNamespace(op=SimpleNamespace(value=op), urn=urn, new=new)
    return SimpleNamespace(res_outputs_event=SimpleNamespace(metadata=meta))


def test_status_says_gone_only_for_an_instance_the_provider_no_longer_finds(
    gpufleet_home, monkeypatch
):
    """The refresh preview targets only the four instances; node-1's is gone (EC2's provider
    drops a terminated instance from the state on read), node-2 is stopped, the others run."""
    info, registered, stacks, _ = make_cluster("aws", monkeypatch)
    urn = {urn_name(r["urn"]): r["urn"] for r in registered}
    asked: list[dict] = []

    def preview_refresh(self, **kw):
        asked.append(kw)
        for ev in [
            step("refresh", urn["c4-node-0"], {"instanceState": "running"}),
            step("refresh", urn["c4-node-1"], None),
            step("refresh", urn["c4-node-2"], {"instanceState": "stopped"}),
            step("same", urn["c4-node-3"], {"instanceState": "running"}),
        ]:
            kw["on_event"](ev)

    monkeypatch.setattr(FakeStack, "preview_refresh", preview_refresh, raising=False)
    words = pp.PulumiProvisioner().status(info)
    assert words == {
        "node-0": "running",
        "node-1": "gone",
        "node-2": "stopped",
        "node-3": "running",
    }
    assert asked[0]["target"] == sorted(urn[f"c4-node-{i}"] for i in range(4))
    assert all(not s.ups for s in stacks)  # nothing was changed


def test_status_without_a_view_never_says_gone(gpufleet_home, monkeypatch):
    info, _, _, _ = make_cluster("aws", monkeypatch)

    def no_credentials(self, **kw):
        raise RuntimeError("error: No valid credential sources found")

    monkeypatch.setattr(FakeStack, "preview_refresh", no_credentials, raising=False)
    assert set(pp.PulumiProvisioner().status(info).values()) == {"in stack"}


def test_an_extended_cluster_s_program_is_told_its_new_expiry(gpufleet_home, monkeypatch):
    """`gpufleet extend` recorded the later expiry in the stack's config of its own run; the
    replacement's program gets it again, or it would call the live cluster expired."""
    info, _, stacks, _ = make_cluster("gcp", monkeypatch)
    info.provider["created_expires_at"] = 1_900_000_000
    info.expires_at = 1_900_003_600
    pp.PulumiProvisioner(policy=False).replace(info, ["node-3"], lambda _m: None)
    assert stacks[0].config["gpufleet:extendedTo"] == "1900003600"
