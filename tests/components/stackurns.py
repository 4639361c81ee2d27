"""Run a stack file's program under Pulumi mocks and keep what the engine would: URN and parent."""

from __future__ import annotations

from typing import Any

import pulumi

from gpufleet.components import stackconfig
from gpufleet.components.preview import RecordingMocks, RecordingMonitor


class UrnMonitor(RecordingMonitor):
    """The mock monitor, also keeping each registration as `pulumi stack export` lists it."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.registered: list[dict[str, Any]] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.registered.append(
            {"urn": response.urn, "parent": request.parent, "type": request.type}
        )
        return response


def run_stack(
    stack: str, config: dict[str, Any] | None = None, **overrides: Any
) -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
    """(the registered resources, the resolved stack outputs, the program) of stack file
    `stack` with spec fields overridden and extra stack `config`; the program is what the
    provisioner would hand the Automation API (it runs under the mocks set here)."""
    conf = {**stackconfig.stack_config(stack), **(config or {})}
    spec = stackconfig.spec_from_config(conf, stack=stack).with_(**overrides)
    return run_spec(spec, conf)


def run_spec(
    spec: Any,
    conf: dict[str, Any],
    program: Any = None,
    exported: dict[str, Any] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any], Any]:
    """run_stack's work for a spec; `program` (one that calls pulumi.export into `exported`)
    instead of the fleet's own."""
    mocks = RecordingMocks()
    monitor = UrnMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=spec.name, monitor=monitor)
    pulumi.runtime.set_all_config(stackconfig.pulumi_config(conf))
    resolved: dict[str, Any] = {}

    def own() -> dict[str, Any]:
        fleet = stackconfig.build(spec, expires_at=1_900_000_000)
        return stackconfig.exports(fleet)

    @pulumi.runtime.test
    def run() -> Any:
        if program is None:
            exports = own()
        else:
            program()
            exports = dict(exported or {})
        keys = list(exports)
        return pulumi.Output.all(*[exports[k] for k in keys]).apply(
            lambda vals: resolved.update(dict(zip(keys, vals, strict=True)))
        )

    run()
    return monitor.registered, resolved, program or own
