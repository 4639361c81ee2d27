"""benchmarks/plan.py's pure parts: its STACK:N arguments and its count of resources by type."""

import argparse
import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "plan.py"
_SPEC = importlib.util.spec_from_file_location("bench_plan", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_parse_run_reads_stack_and_nodes() -> None:
    assert bench.parse_run("aws-p5:512") == ("aws-p5", 512)


@pytest.mark.parametrize("text", ["aws-p5", "aws-p5:", ":4", "aws-p5:0", "aws-p5:x"])
def test_parse_run_refuses_what_is_not_stack_colon_n(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        bench.parse_run(text)


def test_resource_counts_tell_a_node_s_resources_from_the_cluster_s() -> None:
    resources = [
        {"type": "aws:ec2/instance:Instance", "name": "c-node-0"},
        {"type": "aws:ec2/instance:Instance", "name": "c-node-1"},
        {"type": "aws:ec2/eip:Eip", "name": "c-node-0-eip"},
        {"type": "aws:ec2/eip:Eip", "name": "c-nat-eip"},
    ]
    assert bench.resource_counts(resources) == {
        "aws:ec2/eip:Eip": {"total": 2, "per_node_named": 1},
        "aws:ec2/instance:Instance": {"total": 2, "per_node_named": 2},
    }
