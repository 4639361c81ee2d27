"""Evaluates a Pulumi program offline under mocks and records every resource it registers."""

from __future__ import annotations

import contextlib
import gc
import hashlib
import importlib
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime.mocks import MockMonitor


@dataclass
class PlannedResource:
    type: str
    name: str
    inputs: dict[str, Any]
    parent: str | None = None  # the parent's name
    depends_on: list[str] = field(default_factory=list)  # names: explicit and through inputs
    retain_on_delete: bool = False
    replace_on_changes: list[str] = field(default_factory=list)  # inputs replaced, not updated
    delete_before_replace: bool = False
    provider: str | None = None  # the explicit provider's name; None: the default provider


@dataclass
class PlannedCall:
    """One invoke (a data lookup) the program made, and the provider it asked."""

    token: str
    args: dict[str, Any]
    provider: str | None = None  # the explicit provider's name; None: the default provider


@dataclass
class Plan:
    resources: list[PlannedResource] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    calls: list[PlannedCall] = field(default_factory=list)

    def of_type(self, typ: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == typ]

    def one(self, typ: str) -> PlannedResource:
        found = self.of_type(typ)
        assert len(found) == 1, f"expected one {typ}, found {len(found)}"
        return found[0]


def stable_number(name: str) -> int:
    """A number per resource name for fake ids and addresses: node K's are K, others a hash.

    Not the registration order, which varies between runs: two plans must be identical.
    """
    m = re.search(r"-node-(\d+)", name)
    return int(m.group(1)) if m else zlib.crc32(name.encode()) % 1000


def fake_public_key(seed: str) -> str:
    return "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA" + hashlib.sha256(seed.encode()).hexdigest()[:40]


def _cloud_mocks() -> list[Any]:
    """Per-cloud fake outputs (components/<cloud>/mocks.py), where a cloud package has them."""
    found = []
    for cloud in ("aws", "gcp", "azure"):
        with contextlib.suppress(ModuleNotFoundError):
            found.append(importlib.import_module(f"gpufleet.components.{cloud}.mocks"))
    return found


class RecordingMocks(pulumi.runtime.Mocks):
    """Echo inputs back as outputs, plus the computed fields a cloud would fill in."""

    def __init__(self, account: Any = None) -> None:
        self.plan = Plan()
        self.clouds = _cloud_mocks()
        # A FakeAccount (components/validators.py) answers first, and makes the validators run.
        self.account = account

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        from gpufleet.components.expiry import fake_outputs as expiry_outputs

        # A dynamic resource's `__provider` is its pickled code, not something a cloud receives.
        inputs = {k: v for k, v in dict(args.inputs).items() if k != "__provider"}
        self.plan.resources.append(
            PlannedResource(args.typ, args.name, inputs, provider=_provider_name(args.provider))
        )
        outputs = dict(args.inputs)
        outputs.update(expiry_outputs(args.typ, inputs) or {})
        if args.typ == "tls:index/privateKey:PrivateKey":
            outputs["public_key_openssh"] = fake_public_key(args.name) + "\n"
            outputs["private_key_openssh"] = (
                "-----BEGIN OPENSSH PRIVATE KEY-----\nMOCK-"
                + args.name
                + "\n-----END OPENSSH PRIVATE KEY-----\n"
            )
        for m in self.clouds:
            extra = m.fake_outputs(args.typ, args.name, args.inputs, stable_number(args.name))
            if extra:
                outputs.update(extra)
        return [f"{args.name}-id", outputs]

    def call(self, args: pulumi.runtime.MockCallArgs):
        self.plan.calls.append(
            PlannedCall(args.token, dict(args.args), _provider_name(args.provider))
        )
        if self.account is not None:
            out = self.account.call(args.token, dict(args.args))
            if out is not None:
                return out
        provider = self._provider_inputs(args.provider)
        for m in self.clouds:
            # A cloud's answer that depends on the provider asked (e.g. its region).
            per_provider = getattr(m, "fake_provider_call", None)
            out = per_provider(args.token, dict(args.args), provider) if per_provider else None
            if out is None:
                out = m.fake_call(args.token, dict(args.args))
            if out is not None:
                return out
        return {}

    def _provider_inputs(self, ref: str | None) -> dict[str, Any] | None:
        """The recorded inputs of the explicit provider an invoke asked; None: the default."""
        name = _provider_name(ref)
        if name is None:
            return None
        # URN: urn:pulumi:STACK::PROJECT::[PARENT-TYPE$]TYPE::NAME, then ::ID for a reference.
        typ = (ref or "").split("::")[2].rsplit("$", 1)[-1]
        for r in reversed(self.plan.resources):
            if (r.type, r.name) == (typ, name):
                return r.inputs
        return None


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _provider_name(ref: str | None) -> str | None:
    """A provider reference (`URN::id`) as the provider resource's name; None: a default
    provider (Pulumi names those `default` or `default_<version>`)."""
    if not ref:
        return None
    name = _urn_name(ref.rsplit("::", 1)[0])
    return None if name == "default" or name.startswith("default_") else name


class RecordingMonitor(MockMonitor):
    """The mock monitor, also noting each resource's parent, dependencies and retention."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recording = mocks

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        # Registrations may interleave across threads: find this one by type and name.
        for r in reversed(self.recording.plan.resources):
            if (r.type, r.name) == (request.type, request.name):
                r.parent = _urn_name(request.parent) if request.parent else None
                r.depends_on = sorted({_urn_name(u) for u in request.dependencies})
                r.retain_on_delete = bool(request.retainOnDelete)
                r.replace_on_changes = list(request.replaceOnChanges)
                r.delete_before_replace = bool(request.deleteBeforeReplace)
                break
        return response


# CPython's default thresholds (700, 10, 10) make a young pass every 700 net allocations and a
# full one each time the heap grew by a quarter; a program's Outputs, futures and tasks live
# until it ends (hundreds of thousands at 512 nodes), so those passes took 40-70% of a plan's
# CPU. Here young passes are 14 times rarer and no full pass runs during the program: young
# cycles are still collected, and the peak memory stays the same (benchmarks/plan.py).
PROGRAM_GC_THRESHOLD = (10_000, 10, 1_000)


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Run a block with PROGRAM_GC_THRESHOLD, then the thresholds as they were."""
    old = gc.get_threshold()
    gc.set_threshold(*PROGRAM_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def evaluate(
    program: Callable[[], dict[str, Any] | None],
    *,
    config: dict[str, str] | None = None,
    project: str = "gpufleet",
    stack: str = "plan",
    account: Any = None,
    into: Plan | None = None,
) -> Plan:
    """Run `program` under mocks; it may return a dict of stack exports to resolve.

    `account`: a FakeAccount (components/validators.py) the validators ask; without one they
    are skipped as offline. `into`: the Plan to record in, which keeps what was registered
    when the program raises (a refusal must come before any resource).
    """
    with fewer_collections():
        return _evaluate(program, config, project, stack, account, into)


def _evaluate(
    program: Callable[[], dict[str, Any] | None],
    config: dict[str, str] | None,
    project: str,
    stack: str,
    account: Any,
    into: Plan | None,
) -> Plan:
    mocks = RecordingMocks(account)
    if into is not None:
        mocks.plan = into
    pulumi.runtime.set_mocks(
        mocks, project=project, stack=stack, preview=False, monitor=RecordingMonitor(mocks)
    )
    pulumi.runtime.set_all_config(config or {})
    resolved: dict[str, Any] = {}

    @pulumi.runtime.test
    def run() -> Any:
        exports = program() or {}
        keys = list(exports)
        return pulumi.Output.all(*[exports[k] for k in keys]).apply(
            lambda vals: resolved.update(dict(zip(keys, vals, strict=True)))
        )

    run()
    mocks.plan.outputs = resolved
    return mocks.plan
