"""Every stack file: a valid spec, a plan under mocks, and the same contract from all clouds."""

from __future__ import annotations

import pytest

from components import stackconfig
from components.contract import OUTPUT_NAMES
from tests.components.stackplans import assert_contract, plan

STACKS = stackconfig.stack_names()


def test_the_ready_stacks_exist():
    assert set(STACKS) >= {
        "aws-p4d", "aws-p5", "aws-g5", "gcp-a2", "gcp-a3", "gcp-g2", "azure-nd-a100",
        "azure-nd-h100",
    }  # fmt: skip


@pytest.mark.parametrize("stack", STACKS)
def test_stack_plans_with_the_shared_contract(stack):
    spec = stackconfig.spec_from_stack(stack)
    p = plan(stack)
    assert p.one(f"gpufleet:{spec.cloud}:GpuFleet").name == stack
    assert tuple(p.outputs) == OUTPUT_NAMES
    assert_contract(p, spec.nodes)


def test_clouds_share_output_names():
    names = {stackconfig.spec_from_stack(s).cloud: tuple(plan(s).outputs) for s in STACKS}
    assert set(names) == {"aws", "gcp", "azure"} and len(set(names.values())) == 1
