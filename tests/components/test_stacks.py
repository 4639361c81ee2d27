"""Every stack file: a valid spec, a plan under mocks, and the same contract from all clouds."""

from __future__ import annotations

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.contract import OUTPUT_NAMES
from gpufleet.components.registry import FLEET_CLASSES
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
    assert p.one(f"gpufleet:index:{FLEET_CLASSES[spec.cloud]}").name == stack
    assert tuple(p.outputs) == OUTPUT_NAMES
    assert_contract(p, spec.nodes)


def test_clouds_share_output_names():
    names = {stackconfig.spec_from_stack(s).cloud: tuple(plan(s).outputs) for s in STACKS}
    assert set(names) == {"aws", "gcp", "azure"} and len(set(names.values())) == 1


def run_stack_program(stack: str, config: dict):
    """Evaluate stacks/__main__.py, the program a bare `pulumi up` runs, under mocks."""
    import runpy

    from gpufleet.components.preview import evaluate

    main = stackconfig.STACKS_DIR / "__main__.py"
    return evaluate(
        lambda: runpy.run_path(str(main)) and None,
        config=stackconfig.pulumi_config(config),
        stack=stack,
    )


@pytest.mark.parametrize(
    ("stack", "key", "other"),
    [
        ("aws-p4d", "aws:region", "eu-west-1"),
        ("gcp-a2", "gcp:region", "europe-west4"),
        ("azure-nd-a100", "azure-native:location", "westeurope"),
    ],
)
def test_a_bare_pulumi_up_refuses_a_provider_region_unlike_the_specs(stack, key, other):
    """AWS creates every resource in the provider's aws:region (the components name no region
    per resource; pulumi.com/registry/packages/aws/installation-configuration), so a spec for
    another region would be checked, zoned and priced for a region the fleet is not built in.
    GCP and Azure resources name the spec's region themselves, and gcp:region /
    azure-native:location is only the provider's default (pulumi-azure-native config/vars:
    `location`): a stack file that says two regions is ambiguous. Either way the stack program
    a bare `pulumi up` runs refuses it before anything exists, as the CLI does."""
    from gpufleet.components.errors import SpecError

    config = stackconfig.stack_config(stack)
    assert config["gpufleet:cluster"]["region"] != other
    run_stack_program(stack, config)  # the stack as shipped plans
    with pytest.raises(Exception) as e:
        run_stack_program(stack, {**config, key: other})
    err = e.value
    while err is not None and not isinstance(err, SpecError):
        err = err.__cause__ or err.__context__
    assert isinstance(err, SpecError) and err.field == "region"
    assert f"{key} is {other}" in str(err)
