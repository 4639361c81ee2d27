"""The Automation API across expiry and over stacks it did not make: `down` refreshes first,
`up` refreshes and refuses to create nodes past their expiry, and `up` of a name whose stack
already holds resources (another user's on a shared backend, or one left from an earlier
cluster) is refused before anything changes and never destroyed."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.components import expiry
from gpufleet.components.preview import RecordingMocks, evaluate
from gpufleet.provision import pulumi as pp
from tests.gpufleet.provision.test_pulumi import PUBLISHED_KEY, spec

HOUR = 3600
INSTANCE = "aws:ec2/instance:Instance"


class StateStack:
    """A stack with a state (resource types), as the Automation API drives it.

    The cloud says the nodes are `gone` (they removed themselves at expiry): only a refresh
    (`refresh=True`) drops them from the state. `up` runs the inline program under mocks over
    the state's Expiry (first applied at `created_at`); `destroy` deletes what the state holds.
    """

    def __init__(self, program: Any, *, created_at: int | None, gone: bool) -> None:
        self.program, self.created_at, self.gone = program, created_at, gone
        self.name = "t"
        self.workspace = self
        self.calls: list[tuple[str, bool]] = []
        self.deleted: list[str] = []
        self.registered: list[str] = []
        self.removed = False
        self.state: list[str] = (
            []
            if created_at is None
            else ["pulumi-python:dynamic:Resource", "aws:ec2/vpc:Vpc", INSTANCE, INSTANCE]
        )

    def set_config(self, *_: Any) -> None:
        pass

    def get_all_config(self) -> dict:
        return {}

    def remove_stack(self, _name: str) -> None:
        self.removed = True

    def _refresh(self) -> None:
        if self.gone:
            self.state = [t for t in self.state if t != INSTANCE]

    def up(self, **kw: Any) -> Any:
        self.calls.append(("up", bool(kw.get("refresh"))))
        if kw.get("refresh"):
            self._refresh()
        original = RecordingMocks.new_resource

        def recording(mocks: RecordingMocks, args: Any) -> Any:
            self.registered.append(args.typ)
            return original(mocks, args)

        RecordingMocks.new_resource = recording  # type: ignore[method-assign]
        try:
            if self.created_at is None:
                plan = evaluate(self.program_exports, config={"aws:region": "us-east-1"})
            else:
                with expiry.applied(self.created_at, 240):
                    plan = evaluate(self.program_exports, config={"aws:region": "us-east-1"})
        except Exception as e:
            raise RuntimeError(f"error: an unhandled error occurred: program failed: {e}") from e
        finally:
            RecordingMocks.new_resource = original  # type: ignore[method-assign]
        return SimpleNamespace(
            outputs={k: SimpleNamespace(value=v) for k, v in plan.outputs.items()}
        )

    def program_exports(self) -> dict[str, Any]:
        import pulumi

        exported: dict[str, Any] = {}
        real = pulumi.export
        pulumi.export = lambda k, v: exported.__setitem__(k, v)  # type: ignore[assignment]
        try:
            self.program()
        finally:
            pulumi.export = real
        return exported

    def destroy(self, **kw: Any) -> None:
        self.calls.append(("destroy", bool(kw.get("refresh"))))
        if kw.get("refresh"):
            self._refresh()
        self.deleted, self.state = list(self.state), []


class Backend:
    """The backend's stacks as the Automation API's workspace lists and exports them: the
    stack `t` with the resource types of `state` (None: no such stack)."""

    def __init__(self, state: list[str] | None) -> None:
        self.state = state
        self.asked: list[str] = []

    def list_stacks(self) -> list[Any]:
        self.asked.append("list")
        return [] if self.state is None else [SimpleNamespace(name="org/gpufleet/t")]

    def export_stack(self, name: str) -> Any:
        self.asked.append(f"export {name}")
        assert self.state is not None
        bookkeeping = [{"type": "pulumi:pulumi:Stack"}, {"type": "pulumi:providers:aws"}]
        resources = [*bookkeeping, *({"type": t} for t in self.state)] if self.state else []
        return SimpleNamespace(deployment={"resources": resources})


@pytest.fixture
def driven(gpufleet_home, monkeypatch):
    """Makes the stack `_stack` returns: a StateStack over the given state, which the backend
    lists (with its resources) when it has any."""
    made: list[StateStack] = []

    def make(**state: Any) -> list[StateStack]:
        probe = StateStack(lambda: None, **state)
        backend = Backend(probe.state or None)

        def stack(_spec: Any, _backend: Any, program: Any = None, **_kw: Any) -> StateStack:
            made.append(StateStack(program or (lambda: None), **state))
            return made[-1]

        monkeypatch.setattr(pp, "_stack", stack)
        monkeypatch.setattr(pp, "_workspace", lambda _b: backend)
        monkeypatch.setattr(pp, "may_hold_stacks", lambda _b=None: True)
        return made

    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "the team's")  # a shared backend's secrets
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda *_: None)
    monkeypatch.setattr(pp.hostkeypin, "require_channel", lambda cloud: None)
    monkeypatch.setattr(
        pp.hostkeypin, "read_keys", lambda c, at, *a, **kw: {n: PUBLISHED_KEY for n in at}
    )
    return make


def test_down_refreshes_before_it_destroys(driven):
    """`gpufleet down` after expiry: the refresh drops the nodes that removed themselves, and
    only what is left (network, expiry) is deleted."""
    from tests.gpufleet.fakes import cluster

    made = driven(created_at=int(time.time()) - 5 * HOUR, gone=True)
    pp.PulumiProvisioner("file:///tmp/x").down(cluster(cloud="aws"), lambda _m: None)
    (stack,) = made
    assert stack.calls == [("destroy", True)]
    assert stack.deleted == ["pulumi-python:dynamic:Resource", "aws:ec2/vpc:Vpc"]
    assert stack.removed


def test_up_refuses_a_live_stack_it_did_not_create_and_leaves_it_as_it_is(driven):
    """A teammate's live cluster `t` on the shared backend (no record of it here): `up` of a
    cluster named `t` neither updates nor destroys it, and says what to do instead."""
    made = driven(created_at=int(time.time()) - HOUR, gone=False)
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner("s3://team-state").up(s, lambda _m: None)
    assert made == [], "no stack was selected: nothing ran `up` or `destroy` on it"
    assert "stack t already exists in s3://team-state with 4 resources" in e.value.message
    assert "--name" in e.value.hint and "gpufleet attach NAME --stack t" in e.value.hint
    assert e.value.exit_code == 2


def test_up_over_a_stack_left_after_expiry_is_refused_before_it_runs(driven):
    """A stack whose nodes removed themselves (no record here): refused like any stack gpufleet
    did not create here; nothing registered, nothing deleted (its owner removes it)."""
    made = driven(created_at=int(time.time()) - 5 * HOUR, gone=True)
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    with pytest.raises(pp.StackTaken) as e:
        pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    assert made == []
    assert "pulumi destroy" in e.value.hint and "gpufleet sweep" in e.value.hint


def test_a_refreshed_up_after_expiry_refuses_rather_than_recreating():
    """Plain `pulumi up` on the project (Pulumi.yaml `refresh: always`) 5 h after a 4 h TTL:
    the refresh reports the instances gone and drops them from the state, and the program, over
    the Expiry in that state, is refused before it registers any node again."""
    from gpufleet.components.stackconfig import build, exports

    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    stack = StateStack(lambda: exports(build(s)), created_at=int(time.time()) - 5 * HOUR, gone=True)
    with pytest.raises(RuntimeError, match="expired at") as e:
        stack.up(refresh=True)
    refusal = e.value.__cause__
    print(f"\n{refusal}\n  fix: {refusal.hint}")
    assert stack.calls == [("up", True)]
    assert INSTANCE not in stack.state, "the refresh dropped the nodes that removed themselves"
    assert INSTANCE not in stack.registered, "no node was created again past its expiry"
    assert "pulumi destroy" in refusal.hint and "raise ttl_minutes" in refusal.hint


class FailingStack(StateStack):
    """Its `up` fails after the program ran (a policy violation, an API error)."""

    def up(self, **kw: Any) -> Any:
        super().up(**kw)
        self.state += self.registered  # what the update created before it failed
        raise RuntimeError("error: creating EC2 Instance: UnauthorizedOperation")


@pytest.fixture
def failing(driven, monkeypatch):
    def make(state: list[str] | None) -> tuple[list[FailingStack], Backend]:
        made: list[FailingStack] = []
        backend = Backend(state)

        def stack(_spec: Any, _backend: Any, program: Any = None, **_kw: Any) -> FailingStack:
            made.append(FailingStack(program or (lambda: None), created_at=None, gone=False))
            return made[-1]

        monkeypatch.setattr(pp, "_stack", stack)
        monkeypatch.setattr(pp, "_workspace", lambda _b: backend)
        monkeypatch.setattr(pp, "may_hold_stacks", lambda _b=None: True)
        return made, backend

    return make


def test_a_foreign_stack_is_never_destroyed_when_up_would_fail(failing):
    """On the code before this check, the failed update of someone's stack was cleaned up
    with `stack.destroy` and `remove_stack`: their cluster gone. Now it is never touched."""
    made, _ = failing([INSTANCE, INSTANCE])
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner("s3://team-state").up(s, lambda _m: None)
    assert [st.calls for st in made] == [], "someone's stack was updated, then destroyed"
    assert "already exists" in e.value.message


def test_a_failed_up_destroys_and_removes_the_stack_it_created(failing):
    made, backend = failing(None)
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner("s3://team-state").up(s, lambda _m: None)
    (stack,) = made
    assert stack.calls == [("up", True), ("destroy", True)]
    assert stack.registered.count(INSTANCE) == 2 and stack.deleted.count(INSTANCE) == 2
    assert stack.removed and "UnauthorizedOperation" in e.value.message
    assert backend.asked == ["list"]


def test_a_failed_up_in_an_empty_stack_made_beforehand_keeps_the_stack(failing):
    """`pulumi stack init t` and `pulumi config set gcp:project ...` beforehand: the stack holds
    no resources, so `up` uses it; a failure destroys what this call made in it, and keeps the
    stack and its config (this call did not create it)."""
    made, backend = failing([])
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    with pytest.raises(pp.GpufleetError):
        pp.PulumiProvisioner("s3://team-state").up(s, lambda _m: None)
    (stack,) = made
    assert stack.calls == [("up", True), ("destroy", True)]
    assert stack.deleted.count(INSTANCE) == 2
    assert not stack.removed
    assert backend.asked == ["list", "export t"]


def test_stack_resources_counts_what_a_program_made(monkeypatch):
    """Pulumi's state lists the stack and its default providers as resources too; a stack made
    by `pulumi stack init` has no resources at all."""
    backends = iter([Backend([INSTANCE, "aws:ec2/vpc:Vpc"]), Backend([]), Backend(None)])
    monkeypatch.setattr(pp, "may_hold_stacks", lambda _b=None: True)
    monkeypatch.setattr(pp, "_workspace", lambda _b: next(backends))
    assert pp.stack_resources("t", "s3://b") == 2
    assert pp.stack_resources("t", "s3://b") == 0
    assert pp.stack_resources("t", "s3://b") is None


def test_an_empty_file_backend_is_answered_without_the_pulumi_cli(gpufleet_home, monkeypatch):
    def no_cli(_b: Any) -> Any:
        raise AssertionError("the Pulumi CLI was asked")

    monkeypatch.setattr(pp, "_workspace", no_cli)
    assert pp.stack_resources("t", f"file://{gpufleet_home}/pulumi") is None


def test_a_re_apply_after_the_original_expiry_keeps_an_extended_cluster(monkeypatch):
    """`gpufleet extend` moved the nodes' clock 2 h past the expiry in state (created 5 h ago,
    4 h TTL) and recorded it as gpufleet:extendedTo: a later `pulumi up --refresh` finds the
    nodes there and keeps them (no refusal), and every node's tags keep the creation-time
    expiry (no replacement). Without the record the same run is refused."""
    from gpufleet.components.stackconfig import build, exports

    created = int(time.time()) - 5 * HOUR
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    base = {"aws:region": "us-east-1"}
    extended = {**base, "gpufleet:extendedTo": str(int(time.time()) + 2 * HOUR)}
    with expiry.applied(created, 240):
        plan = evaluate(lambda: exports(build(s)), config=extended)
    instances = plan.of_type(INSTANCE)
    assert len(instances) == 2
    tags = {i.inputs["tags"]["gpufleet-expires"] for i in instances}
    assert tags == {str(created + 4 * HOUR)}
    assert plan.outputs["expires_at"] == created + 4 * HOUR
    with expiry.applied(created, 240), pytest.raises(Exception, match="expired at"):
        evaluate(lambda: exports(build(s)), config=base)


@pytest.mark.parametrize(
    "project", ["Pulumi.yaml", "examples/pulumi-aws-own-vpc/Pulumi.yaml",
                "examples/pulumi-yaml/Pulumi.yaml"],
)  # fmt: skip
def test_every_project_refreshes_before_up_preview_and_destroy(project):
    """Pulumi's project file reference (pulumi.com/docs/iac/concepts/projects/project-file/,
    read 2026-11-25), `options.refresh`: "Set to `always` to always run a refresh as part of a
    pulumi update / preview / destroy". Without it a plain `pulumi up` after expiry shows no
    changes while the nodes are gone."""
    import yaml

    from tests.integration.conftest import ROOT

    doc = yaml.safe_load((ROOT / project).read_text())
    assert doc.get("options", {}).get("refresh") == "always"
