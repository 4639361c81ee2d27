"""examples/pulumi-yaml's fleet, constructed as the package constructs it for a YAML program,
registers what the same fleet written in Python registers, and returns the schema's outputs."""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.components.aws.args import AwsGpuFleetArgs
from gpufleet.components.aws.fleet import AwsGpuFleet
from gpufleet.components.fleetargs import spec_from_args
from gpufleet.components.preview import Plan, evaluate
from gpufleet.components.stackconfig import exports
from tests.package.helpers import YAML_PROGRAM, construct, over_the_wire, provider

# The same fleet as examples/pulumi-yaml, written in Python.
PYTHON_ARGS = AwsGpuFleetArgs(
    cluster_name="yaml-p5",
    nodes=2,
    instance_type="p5.48xlarge",
    region="us-east-1",
    ssh_cidrs=["203.0.113.7/32"],
    ttl_minutes=240,
    tags={"team": "research"},
)


def yaml_resource() -> tuple[str, str, dict[str, Any]]:
    """(name, type, properties) of the YAML program's one resource."""
    doc = yaml.safe_load(YAML_PROGRAM.read_text())
    assert doc["runtime"] == "yaml"
    [(name, res)] = doc["resources"].items()
    return name, res["type"], res["properties"]


def python_plan() -> Plan:
    return evaluate(lambda: exports(AwsGpuFleet("fleet", PYTHON_ARGS)), stack="yaml")


def summary(plan: Plan) -> list[tuple[str, str, str | None, dict[str, Any]]]:
    return sorted(
        (r.type, r.name, r.parent, {k: v for k, v in r.inputs.items() if k != "__provider"})
        for r in plan.resources
    )


def test_yaml_properties_map_to_the_python_args_clusterspec():
    _, token, props = yaml_resource()
    definition = provider()._component_defs[token.rsplit(":", 1)[-1]]
    mapped = provider().map_inputs(over_the_wire(props), definition)
    assert spec_from_args("aws", "fleet", mapped) == spec_from_args("aws", "fleet", PYTHON_ARGS)


def test_yaml_program_registers_what_the_python_program_registers():
    name, token, props = yaml_resource()
    assert token == "gpufleet:index:AwsGpuFleet"
    from_yaml, _ = construct(token, name, props)
    from_python = python_plan()
    assert summary(from_yaml) == summary(from_python)
    types = {r.type for r in from_yaml.resources}
    assert {"gpufleet:index:AwsGpuFleet", "aws:ec2/instance:Instance"} <= types
    instances = from_yaml.of_type("aws:ec2/instance:Instance")
    assert len(instances) == 2
    assert all(i.inputs["tags"]["team"] == "research" for i in instances)
    assert all(i.inputs["tags"]["gpufleet-cluster"] == "yaml-p5" for i in instances)


def test_outputs_reach_another_language_with_schema_names_and_secrets():
    name, token, props = yaml_resource()
    _, state = construct(token, name, props)
    python = python_plan().outputs
    schema = provider().get_schema()["resources"][token]["properties"]
    outputs = {k: v for k, v in state.items() if not k.startswith("secret:")}
    assert set(outputs) == set(schema)
    assert outputs["clusterName"] == python["cluster_name"] == "yaml-p5"
    assert outputs["sshUser"] == python["ssh_user"]
    assert outputs["expiresAt"] == python["expires_at"]
    # Each node as the schema's FleetNode: camelCase keys, the Python output's values.
    fields = provider().get_schema()["types"]["gpufleet:index:FleetNode"]["properties"]
    assert len(outputs["nodes"]) == len(python["nodes"]) == 2
    for got, want in zip(outputs["nodes"], python["nodes"], strict=True):
        assert set(got) <= set(fields)
        assert got["privateIp"] == want["private_ip"]
        assert got["instanceId"] == want["instance_id"]
        assert got.get("publicIp") == want["public_ip"]  # absent on a worker: None in Python
    assert outputs["nodes"][0]["publicIp"], "the head has a public address"
    secret = {k for k in outputs if state[f"secret:{k}"]}
    assert secret == {k for k, p in schema.items() if p.get("secret")} == {"sshPrivateKey"}
