"""`gpufleet sweep` over the cloud stacks in the Pulumi backend, with a fake Automation API."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from gpufleet.cli import main
from gpufleet.core import state
from gpufleet.provision import pulumi as pp
from tests.gpufleet.fakes import cluster

HOUR = 3600


class FakeBackend:
    """The Automation API's view of a backend: stacks with outputs; destroy + rm record calls.

    Like `pulumi stack ls` / `stack output`: LocalWorkspace.list_stacks() answers the
    project's stacks (StackSummary.name), stack_outputs(name) their last `up`'s outputs
    (OutputValue.value); a stack whose `up` never finished has none.
    """

    def __init__(self, outputs: dict[str, dict]):
        self.outputs = outputs
        self.config: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, str]] = []

    def list_stacks(self):
        return [SimpleNamespace(name=n, current=False) for n in self.outputs]

    def stack_outputs(self, name):
        return {k: SimpleNamespace(value=v, secret=False) for k, v in self.outputs[name].items()}

    def get_config(self, name, key):
        """Like `pulumi config get`: a key the stack lacks is an error (CommandError)."""
        value = self.config.get(name, {}).get(key)
        if value is None:
            raise RuntimeError(f"configuration key '{key}' not found for stack '{name}'")
        return SimpleNamespace(value=value, secret=False)

    def stack(self, name, _backend, _program=None):
        backend = self

        class Stack:
            def __init__(self):
                self.name, self.workspace = name, self

            def destroy(self, **_):
                backend.calls.append(("destroy", name))

            def remove_stack(self, stack_name):
                backend.calls.append(("rm", stack_name))
                backend.outputs.pop(stack_name, None)

        return Stack()


def fake_backend(monkeypatch) -> FakeBackend:
    """An empty FakeBackend put where the provisioner reaches the Automation API."""
    fake = FakeBackend({})
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda: None)
    monkeypatch.setattr(pp, "_workspace", lambda _b: fake)
    monkeypatch.setattr(pp, "_stack", fake.stack)
    monkeypatch.setattr(pp, "may_hold_stacks", lambda _b=None: True)
    return fake


@pytest.fixture
def backend(gpufleet_home, monkeypatch):
    return fake_backend(monkeypatch)


def outputs(name: str, expires_at: float | None) -> dict:
    return {"cluster_name": name, "expires_at": expires_at, "ssh_user": "ubuntu"}


def record(name: str, expires_at: float, owner: int | None = None) -> None:
    info = cluster().model_copy(
        update={"name": name, "expires_at": expires_at, "provider": {"stack": name}}
    )
    state.cluster_dir(name).mkdir(parents=True, exist_ok=True)
    state.save(info)
    if owner is not None:
        state.set_owner(name, owner)


def destroyed(fake: FakeBackend) -> set[str]:
    done = {n for c, n in fake.calls if c == "destroy"}
    assert done == {n for c, n in fake.calls if c == "rm"}  # each destroyed stack is removed
    return done


def scene(fake: FakeBackend) -> None:
    """Seven stacks in the backend; which are leftovers is written in their names."""
    now = time.time()
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record("run-dead", now + HOUR, owner=p.pid)  # owner start time recorded while alive
    finally:
        p.kill()
        p.wait()
    record("kept-up", now + HOUR)  # `up`: no owner, kept on purpose
    record("run-live", now + HOUR, owner=None)
    state.set_owner("run-live")  # this test process: alive
    record("kept-expired", now - 60)
    fake.outputs.update(
        {
            "run-dead": outputs("run-dead", now + HOUR),
            "kept-up": outputs("kept-up", now + HOUR),
            "run-live": outputs("run-live", now + HOUR),
            "kept-expired": outputs("kept-expired", now - 60),
            "no-record": outputs("no-record", now + HOUR),
            "half-made": {},  # `up` killed before its outputs: no record left either
            # an image bake whose `image bake` died before removing its builder: the builder goes
            "t-image": {"image_id": "ami-1", "expires_at": now + HOUR, "gpufleet_kind": "bake"},
        }
    )


def test_sweep_destroys_stacks_no_live_cli_owns_and_expired_ones(backend, capsys):
    """A cluster's cloud resources live in its Pulumi stack until `pulumi destroy`: a node
    that terminated itself at expiry (cloud-init TTL timer) still leaves the network, security
    group and key pair the stack made, and a cluster whose CLI died leaves everything. Pulumi
    docs, Automation API: LocalWorkspace.list_stacks() lists the project's stacks in the
    backend, Stack.destroy() deletes their resources and Workspace.remove_stack() the stack
    (https://www.pulumi.com/docs/reference/pkg/python/pulumi/#pulumi.automation.LocalWorkspace).
    """
    scene(backend)
    assert main(["sweep", "--yes"]) == 0
    err = capsys.readouterr().err
    assert destroyed(backend) == {"run-dead", "kept-expired", "no-record", "half-made", "t-image"}
    assert set(backend.outputs) == {"kept-up", "run-live"}
    assert "stack t-image (cluster t-image): an image bake no live" in err
    assert "stack no-record (cluster no-record): no record of its cluster here" in err
    assert "stack kept-expired (cluster kept-expired): expired" in err
    assert "run-dead: its `run` is dead" in err
    for gone in ("run-dead", "kept-expired"):
        assert not state.known(gone) and state.was_removed(gone)
    assert state.exists("kept-up") and state.exists("run-live")


def test_dry_run_lists_the_leftovers_and_destroys_nothing(backend, capsys):
    scene(backend)
    assert main(["sweep", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert backend.calls == []
    for name in ("no-record", "kept-expired", "half-made", "run-dead", "t-image"):
        assert name in err
    assert "kept-up" not in err and "run-live" not in err
    assert {"run-dead", "kept-up", "run-live", "kept-expired"} <= set(state.names())


def test_without_yes_off_a_terminal_nothing_is_destroyed(backend, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    backend.outputs["no-record"] = outputs("no-record", time.time() + HOUR)
    assert main(["sweep"]) != 0
    err = capsys.readouterr().err
    assert "pass --yes" in err and "Traceback" not in err
    assert backend.calls == []


def test_a_cluster_being_created_is_not_swept(backend, capsys):
    """`up` holds the name's lock from before `pulumi up` until its record is saved: a stack
    with no outputs and no record yet is then in the middle of being created."""
    backend.outputs["busy"] = {}
    with state.lock("busy"):
        assert main(["sweep", "--yes"]) == 0
    assert backend.calls == []
    assert "nothing to sweep" in capsys.readouterr().err


def test_an_empty_file_backend_needs_no_pulumi(gpufleet_home, monkeypatch):
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    assert not pp.may_hold_stacks()
    stacks = gpufleet_home / "pulumi" / ".pulumi" / "stacks" / "gpufleet"
    stacks.mkdir(parents=True)
    assert not pp.may_hold_stacks()
    (stacks / "c.json").write_text("{}")
    assert pp.may_hold_stacks()
    assert pp.may_hold_stacks("s3://bucket/state")


def test_an_extended_cluster_is_not_swept_past_its_stacks_expiry(backend, capsys):
    """`extend` moves the nodes' expiry and this machine's record, not the stack: its
    expires_at output (and the cloud tags) keep the creation time, because changing them would
    change every node's user data (docs/decisions.md, "Expiry is fixed once per cluster"). sweep
    judges a stack by the record here first, so the extended cluster stays."""
    now = time.time()
    record("ext", now + 2 * 86400)
    backend.outputs["ext"] = outputs("ext", now - 60)  # its creation-time expiry has passed
    assert main(["sweep", "--yes"]) == 0
    assert backend.calls == [] and state.exists("ext")
    assert "nothing to sweep" in capsys.readouterr().err


def test_on_a_shared_backend_a_teammates_live_stack_is_not_swept(backend, capsys):
    """On a bucket (or Pulumi Cloud) other machines keep their stacks too: a stack with no
    record here is a teammate's cluster until its expiry, never a leftover of this machine."""
    scene(backend)
    assert main(["sweep", "--yes", "--backend", "s3://team-state"]) == 0
    err = capsys.readouterr().err
    # no-record, half-made and the bake are another machine's, live: kept
    assert destroyed(backend) == {"run-dead", "kept-expired"}
    assert {"no-record", "half-made", "t-image"} <= set(backend.outputs)
    assert "no record of its cluster here" not in err


def test_on_a_shared_backend_an_expired_stack_with_no_record_here_is_swept(backend, capsys):
    now = time.time()
    backend.outputs["old"] = outputs("old", now - 60)
    assert main(["sweep", "--yes", "--backend", "s3://team-state"]) == 0
    assert destroyed(backend) == {"old"}
    assert "stack old (cluster old): expired" in capsys.readouterr().err


def test_an_extension_recorded_in_the_stack_keeps_it_from_another_machines_sweep(backend, capsys):
    """`gpufleet extend` writes gpufleet:extendedTo into the stack's config; a machine with no
    record of the cluster judges the stack by it, not by the creation-time expires_at output."""
    now = time.time()
    backend.outputs["ext"] = outputs("ext", now - 60)
    backend.config["ext"] = {"gpufleet:extendedTo": str(int(now + 86400))}
    assert main(["sweep", "--yes", "--backend", "s3://team-state"]) == 0
    assert backend.calls == []
    assert "nothing to sweep" in capsys.readouterr().err
