"""Shared helpers for stack tests: plan a stack file under mocks, look at what it registers."""

from __future__ import annotations

from typing import Any

from gpufleet.components import stackconfig
from gpufleet.components.contract import OUTPUT_NAMES, cluster_info_from_outputs
from gpufleet.components.preview import Plan, evaluate


def plan(stack: str, **overrides: Any) -> Plan:
    """Evaluate stack `stack` (with spec fields overridden) under Pulumi mocks."""
    return plan_and_fleet(stack, **overrides)[0]


def plan_and_fleet(stack: str, **overrides: Any) -> tuple[Plan, Any]:
    """plan(), and the GpuFleet component object the program built."""
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack)
    if overrides:
        spec = spec.with_(**overrides)
    built: list[Any] = []

    def program() -> dict[str, Any]:
        built.append(stackconfig.build(spec, expires_at=1_900_000_000))
        return stackconfig.exports(built[0])

    p = evaluate(program, config=stackconfig.pulumi_config(config), stack=stack)
    return p, built[0]


def assert_contract(p: Plan, nodes: int) -> None:
    """The outputs every cloud shares, and the ClusterInfo the CLI builds from them."""
    assert tuple(p.outputs) == OUTPUT_NAMES
    info = cluster_info_from_outputs(p.outputs, ssh_key_path="/k", known_hosts_path="/kh")
    assert [n.name for n in info.nodes] == [f"node-{i}" for i in range(nodes)]
    assert all(n.private_ip for n in info.nodes)
    assert info.head.public_ip, "the head needs a public address"
    assert info.host_key_rotation is not None  # user-data keys are replaced on first contact
    for n, out in zip(info.nodes, p.outputs["nodes"], strict=True):
        if out.get("host_key_at"):  # the node makes its own key: the CLI reads it from there
            assert not n.host_key and not n.bootstrap_host_key
            assert n.private_ip not in p.outputs["known_hosts"]
        else:  # a bootstrap key, pinned under every address it is reached by
            assert n.host_key and n.bootstrap_host_key
            assert f"{n.private_ip} {n.host_key}" in p.outputs["known_hosts"]
    assert info.expires_at == 1_900_000_000
    # what a plain-`pulumi` user reaches the nodes with: the CLI's own renderings of the same
    from gpufleet.jobs import hostfile

    assert p.outputs["head_address"] == info.head.public_ip
    assert p.outputs["hostfile"] == hostfile.render(info, "openmpi")
    hosts = [ln.split()[1:] for ln in p.outputs["ssh_config"].splitlines() if ln[:5] == "Host "]
    assert hosts == [[info.name, f"{info.name}-node-0"]] + [
        [f"{info.name}-{n.name}"] for n in info.nodes[1:]
    ]


def tagged_with_cluster(tags: dict | None, cluster: str) -> bool:
    return bool(tags) and tags.get("gpufleet-cluster") == cluster and "gpufleet-expires" in tags


def refused_before_anything(stack: str, config: dict[str, str] | None = None, **overrides: Any):
    """Plan stack `stack` expecting a SpecError; (the error, the resources registered first).

    `config` replaces stack config keys (e.g. the provider's region). The resources are what
    the mocks' new_resource saw: a check that runs before registering leaves it empty.
    """
    import pytest

    from gpufleet.components.errors import SpecError

    raw = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(raw, stack=stack)
    if overrides:
        spec = spec.with_(**overrides)
    made = Plan()
    with pytest.raises(Exception) as e:
        evaluate(
            lambda: stackconfig.exports(stackconfig.build(spec, expires_at=1_900_000_000)),
            config={**stackconfig.pulumi_config(raw), **(config or {})},
            stack=stack,
            into=made,
        )
    err: BaseException | None = e.value
    while err is not None and not isinstance(err, SpecError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, SpecError), f"expected a SpecError, got {e.value!r}"
    return err, [f"{r.type}::{r.name}" for r in made.resources]
