"""The package schema: generated from the components' annotations, checked in, and what a YAML
or TypeScript user relies on (tokens, required inputs, described fields, typed nodes, secrets)."""

from __future__ import annotations

import typing

from gpufleet.components.registry import FLEET_CLASSES, fleet_class
from tests.package.helpers import plugin, provider, schema_golden

TOKENS = {f"gpufleet:index:{c}" for c in FLEET_CLASSES.values()}


def resources() -> dict[str, dict]:
    return provider().get_schema()["resources"]


def test_schema_is_the_checked_in_file(capsys):
    plugin().run(["schema"])  # `python package/__main__.py schema`
    schema_golden(capsys.readouterr().out)


def test_three_components_in_the_index_module():
    assert set(resources()) == TOKENS
    assert all(r["isComponent"] for r in resources().values())


def test_every_input_output_and_type_field_is_described():
    schema = provider().get_schema()
    missing = [
        f"{token}.{name}"
        for token, r in schema["resources"].items()
        for name, prop in {**r["inputProperties"], **r["properties"]}.items()
        if not prop.get("description")
    ] + [
        f"{token}.{name}"
        for token, t in schema["types"].items()
        for name, prop in t["properties"].items()
        if not prop.get("description")
    ]
    assert not missing
    assert all(
        "\n    " not in p["description"]
        for p in schema["types"]["gpufleet:index:FleetNode"]["properties"].values()
    )


def test_inputs_a_yaml_user_relies_on():
    for token, r in resources().items():
        inputs = r["inputProperties"]
        assert r["requiredInputs"] == ["instanceType"], token
        # Fields deciding how many resources exist are plain: no Output can reach them.
        assert inputs["nodes"] == {**inputs["nodes"], "type": "integer", "plain": True}
        assert inputs["instanceType"]["plain"] and inputs["region"]["plain"]
        assert inputs["sshCidrs"]["type"] == "array"
        assert inputs["tags"]["additionalProperties"]["type"] == "string"
        assert all(name[0].islower() and "_" not in name for name in inputs), token


def test_user_owned_ids_are_inputs_where_a_cloud_takes_them():
    """A field the args class declares `pulumi.Input[...]` is not plain in the schema, so a
    YAML `${vpc.id}` can flow in; fields are read from the classes, not listed here."""
    for cloud in FLEET_CLASSES:
        component = fleet_class(cloud)
        args = typing.get_type_hints(component.__init__)["args"]
        # Unevaluated: pulumi.Input's Union holds the forward reference 'Output[T]'.
        hints = dict(args.__annotations__)
        inputs = resources()[f"gpufleet:index:{component.__name__}"]["inputProperties"]
        camel = provider()._component_defs[component.__name__].inputs_mapping
        for field, hint in hints.items():
            name = next(k for k, v in camel.items() if v == field)
            is_input = "Output" in str(hint) or "Awaitable" in str(hint)
            prop = inputs[name]
            if str(hint).startswith("list[") and "items" in prop:  # a plain list of Inputs
                prop = prop["items"]
            assert bool(prop.get("plain")) is not is_input, (component.__name__, field)
    for cloud in ("aws", "gcp"):
        token = f"gpufleet:index:{FLEET_CLASSES[cloud]}"
        assert {"vpcId", "subnetId"} <= set(resources()[token]["inputProperties"])


def test_outputs_are_typed_and_the_key_is_secret():
    schema = provider().get_schema()
    node = schema["types"]["gpufleet:index:FleetNode"]
    assert {"name", "privateIp", "publicIp", "gpus", "hostKey", "instanceId"} <= set(
        node["properties"]
    )
    assert node["properties"]["gpus"]["type"] == "integer"
    for token, r in schema["resources"].items():
        out = r["properties"]
        assert out["nodes"]["items"] == {"$ref": "#/types/gpufleet:index:FleetNode"}, token
        assert out["sshPrivateKey"].get("secret") is True
        assert [k for k, p in out.items() if p.get("secret")] == ["sshPrivateKey"]
        assert out["expiresAt"]["type"] == "integer"
