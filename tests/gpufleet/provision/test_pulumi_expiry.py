"""The Automation API across expiry: `down` and `up` refresh first, and `up` over a stack whose
nodes removed themselves at their expiry refuses to create them again."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from gpufleet.components import expiry
from gpufleet.components.errors import SpecError
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


@pytest.fixture
def driven(gpufleet_home, monkeypatch):
    """Makes the stack `_stack` returns: a StateStack over the given state."""
    made: list[StateStack] = []

    def make(**state: Any) -> list[StateStack]:
        def stack(_spec: Any, _backend: Any, program: Any = None, **_kw: Any) -> StateStack:
            made.append(StateStack(program or (lambda: None), **state))
            return made[-1]

        monkeypatch.setattr(pp, "_stack", stack)
        return made

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


def test_up_over_a_live_stack_refreshes_and_keeps_its_nodes(driven):
    made = driven(created_at=int(time.time()) - HOUR, gone=False)
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    info = pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    (stack,) = made
    assert stack.calls == [("up", True)]
    assert stack.registered.count(INSTANCE) == 2
    assert info.expires_at == stack.created_at + 4 * HOUR  # the state's expiry, not a new one


def test_up_after_expiry_refreshes_and_refuses_rather_than_recreating(driven):
    """The refresh reports the instances gone; the Expiry in state says 4 h after a creation
    5 h ago: `up` registers no node, leaves the earlier stack as it is (it predates this `up`),
    and says how to remove it or start it again."""
    created = int(time.time()) - 5 * HOUR
    made = driven(created_at=created, gone=True)
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"])
    err: SpecError | None = None
    try:
        pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    except SpecError as e:
        err = e
    (stack,) = made
    assert stack.calls == [("up", True)]
    assert INSTANCE not in stack.state, "the refresh reported the instances gone"
    recreated = stack.registered.count(INSTANCE)
    assert not recreated, f"{recreated} nodes created again past their expiry"
    assert err is not None
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(created + 4 * HOUR))
    assert f"cluster t expired at {when}" in err.message
    assert err.hint and "gpufleet sweep" in err.hint and "--ttl" in err.hint
    assert not stack.deleted and not stack.removed
    assert err.exit_code == 2


def test_a_new_ttl_after_expiry_starts_the_nodes_again_from_now(driven):
    """The refusal's other fix: `gpufleet up --ttl 6h` over that stack counts from now."""
    made = driven(created_at=int(time.time()) - 5 * HOUR, gone=True)
    s = spec(ssh_cidrs=["203.0.113.7/32"], zones=["us-east-1b"], ttl_minutes=360)
    before = int(time.time())
    info = pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    (stack,) = made
    assert stack.registered.count(INSTANCE) == 2
    assert before + 6 * HOUR <= info.expires_at <= time.time() + 6 * HOUR
