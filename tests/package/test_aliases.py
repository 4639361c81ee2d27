"""Stacks made before the package (type gpufleet:<cloud>:GpuFleet) keep their resources: the
component carries an alias from the old type, and every old URN, children included, is a new
URN seen through that alias."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from gpufleet.components import fleet as fleet_module
from gpufleet.components import stackconfig
from gpufleet.components.preview import RecordingMocks, RecordingMonitor
from gpufleet.components.registry import FLEET_CLASSES

STACKS = {"aws": "aws-p5", "gcp": "gcp-a3", "azure": "azure-nd-h100"}


class AliasMonitor(RecordingMonitor):
    """Notes each registration's URN and the aliases the SDK sent with it."""

    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.seen: list[tuple[str, Any]] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        self.seen.append((response.urn, list(request.aliases)))
        return response


def types(urn: str) -> list[str]:
    """The type chain of a URN: parent types, then its own."""
    return urn.split("::")[2].split("$")


def register(cloud: str) -> AliasMonitor:
    stack = STACKS[cloud]
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack).with_(expires_at=1_900_000_000)
    mocks = RecordingMocks()
    monitor = AliasMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="p", stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(stackconfig.pulumi_config(config))

    @pulumi.runtime.test
    def run() -> Any:
        return stackconfig.exports(stackconfig.build(spec))["cluster_name"]

    run()
    return monitor


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_component_registers_an_alias_spec_from_the_old_type(cloud):
    monitor = register(cloud)
    token = f"gpufleet:index:{FLEET_CLASSES[cloud]}"
    [aliases] = [a for u, a in monitor.seen if types(u)[-1] == token]
    assert [a.spec.type for a in aliases] == [f"gpufleet:{cloud}:GpuFleet"]
    # Its children send no alias of their own for it: the engine derives theirs from the
    # parent's (azure-native's resources carry their SDK's API-version aliases, unrelated).
    children = [a for u, a in monitor.seen if types(u)[-2:-1] == [token]]
    assert children
    assert not [a for aliases in children for a in aliases if a.spec.type.startswith("gpufleet")]


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_every_urn_of_a_stack_made_before_the_package_is_matched(cloud, monkeypatch):
    """The engine aliases a child when its parent is aliased (its URN under the parent's old
    type); so each old URN must be a new URN with the component's type swapped back."""
    with monkeypatch.context() as m:  # the code before the package: the old type (only URNs
        # are kept: its alias, now to itself, plays no part)
        m.setattr(fleet_module, "type_token", lambda _cls: fleet_module.legacy_type_token(cloud))
        old = {u for u, _ in register(cloud).seen}
    legacy = f"gpufleet:{cloud}:GpuFleet"
    assert any(f"{legacy}$" in u for u in old), "the old stack has children under the old type"
    new = register(cloud)
    token = f"gpufleet:index:{FLEET_CLASSES[cloud]}"
    [aliases] = [a for u, a in new.seen if types(u)[-1] == token]
    [alias] = [a.spec.type for a in aliases]
    assert alias == legacy
    through_alias = {swap_type(u, token, alias) for u, _ in new.seen}
    assert through_alias == old


def swap_type(urn: str, new: str, old: str) -> str:
    """`urn` with `new` replaced by `old` in its type chain (the resource's own or a parent's)."""
    head, chain, name = urn.rsplit("::", 2)
    return "::".join([head, "$".join(old if t == new else t for t in chain.split("$")), name])
