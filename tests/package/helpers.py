"""Shared by the package tests: the hosted provider, the plugin module, a construct under mocks."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pulumi
from pulumi.runtime import rpc

from gpufleet.components.package import FleetProvider
from gpufleet.components.preview import Plan, evaluate

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "package" / "schema.json"
YAML_PROGRAM = ROOT / "examples" / "pulumi-yaml" / "Pulumi.yaml"


@functools.cache
def provider() -> FleetProvider:
    return FleetProvider(plugin().version())


def plugin() -> ModuleType:
    """package/__main__.py as a module (its `if __name__ == "__main__"` does not run)."""
    spec = importlib.util.spec_from_file_location(
        "gpufleet_plugin", ROOT / "package" / "__main__.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def schema_golden(text: str) -> None:
    """package/schema.json is the generated schema; GPUFLEET_UPDATE_GOLDEN=1 (`make golden`,
    which runs every test file calling a *golden( helper) rewrites it."""
    if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
        SCHEMA_FILE.write_text(text)
        return
    assert text == SCHEMA_FILE.read_text(), "package/schema.json differs (`make golden`)"


def over_the_wire(inputs: dict[str, Any]) -> dict[str, Any]:
    """Inputs as a provider's Construct receives them: through protobuf (numbers are floats)."""
    loop = asyncio.new_event_loop()  # not asyncio.run: it unsets the loop Pulumi's mocks use
    try:
        struct = loop.run_until_complete(rpc.serialize_properties(inputs, {}))
    finally:
        loop.close()
    return dict(rpc.deserialize_properties(struct))


def construct(token: str, name: str, inputs: dict[str, Any]) -> tuple[Plan, dict[str, Any]]:
    """Construct `token` through the package's provider under mocks, as a program in another
    language makes it: the plan, and the state the provider returns (resolved; `secret:<k>`
    says whether output k is a secret)."""
    wire = over_the_wire(inputs)

    def program() -> dict[str, Any]:
        result = provider().construct(name, token, wire, pulumi.ResourceOptions())
        state = dict(result.state)
        secrets = {
            f"secret:{k}": pulumi.Output.from_input(pulumi.Output.from_input(v).is_secret())
            for k, v in state.items()
        }
        return {**state, **secrets}

    plan = evaluate(program, stack="yaml")
    return plan, plan.outputs
