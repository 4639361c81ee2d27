"""The three fleets as one Pulumi component package (`gpufleet`), for every Pulumi language."""

import ast
import functools
import inspect
import json
import sys
import textwrap
import typing
from typing import Any

import pulumi
from pulumi.provider.experimental.analyzer import ComponentDefinition, TypeDefinition
from pulumi.provider.experimental.component import ComponentProvider

from gpufleet.components.fleet import PACKAGE

# Outputs a consumer must see as secrets: marked in the schema, and secret Outputs at run time.
SECRET_OUTPUTS = frozenset({"ssh_private_key"})


def fleet_classes() -> list[type[pulumi.ComponentResource]]:
    """The component classes the package hosts (imports every cloud's SDK)."""
    from gpufleet.components.registry import FLEET_CLASSES, fleet_class

    return [fleet_class(cloud) for cloud in FLEET_CLASSES]


class FleetProvider(ComponentProvider):
    """The SDK's component provider, plus what it leaves out for gpufleet's classes.

    - Descriptions of inherited fields: the analyzer reads a field's docstring from the class it
      analyzes only, so FleetArgs' fields and GpufleetComponent's outputs would have none.
    - camelCase keys in a list of objects (`nodes`): get_state maps a top-level object output
      to schema names but passes a list of objects through with its Python keys.
    - `secret: true` on SECRET_OUTPUTS, which the analyzer has no annotation for.
    """

    def __init__(self, version: str = "0.0.0") -> None:
        super().__init__(fleet_classes(), PACKAGE, version=version)
        schema = json.loads(self.schema or "{}")
        for token, resource in schema["resources"].items():
            component = self._components[token.rsplit(":", 1)[-1]]
            definition = self._component_defs[component.__name__]
            args = typing.get_type_hints(component.__init__)["args"]
            describe(resource["inputProperties"], definition.inputs_mapping, args, self)
            describe(resource["properties"], definition.outputs_mapping, component, self)
            for name, prop in resource["properties"].items():
                if definition.outputs_mapping[name] in SECRET_OUTPUTS:
                    prop["secret"] = True
        self.schema = json.dumps(tidy(schema))

    def get_schema(self) -> dict[str, Any]:
        """The package schema, as `pulumi package get-schema` would print it."""
        return dict(json.loads(self.schema or "{}"))

    def get_state(
        self, instance: pulumi.ComponentResource, component_def: ComponentDefinition
    ) -> dict[str, Any]:
        state = super().get_state(instance, component_def)
        for name, prop in component_def.outputs.items():
            item = prop.items
            if name not in state or item is None or not item.ref:
                continue
            type_def = self.get_type_definition(item)
            if type_def is not None and not type_def.enum:
                state[name] = pulumi.Output.from_input(state[name]).apply(
                    functools.partial(self._map_items, type_def)
                )
        for name, py_name in component_def.outputs_mapping.items():
            if py_name in SECRET_OUTPUTS and name in state:
                state[name] = pulumi.Output.secret(state[name])
        return state

    def _map_items(self, type_def: TypeDefinition, values: list[Any]) -> list[Any]:
        """Each object of a list output under its schema names."""
        return [self.map_complex_output(v, type_def) for v in values]


def lineage(cls: type) -> list[type]:
    """`cls` and the classes it inherits from. A TypedDict's __mro__ is dict's: its bases are
    in __orig_bases__ (Python 3.12+), else read from its class statement."""
    seen: list[type] = []
    todo = [cls]
    while todo:
        c = todo.pop(0)
        if c in seen or c in (object, dict) or not isinstance(c, type):
            continue
        seen.append(c)
        todo.extend(typeddict_bases(c) if typing.is_typeddict(c) else c.__mro__)
    return seen


def typeddict_bases(cls: type) -> list[Any]:
    if hasattr(cls, "__orig_bases__"):
        return list(cls.__orig_bases__)
    module = sys.modules[cls.__module__]
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    statement = next(s for s in tree.body if isinstance(s, ast.ClassDef))
    return [getattr(module, b.id, None) for b in statement.bases if isinstance(b, ast.Name)]


def describe(
    props: dict[str, Any], mapping: dict[str, str], cls: type, provider: ComponentProvider
) -> None:
    """Give each property without a description the docstring of its field where declared."""
    for name, prop in props.items():
        if prop.get("description"):
            continue
        for c in lineage(cls):
            if c.__module__.startswith("pulumi."):
                continue
            doc = provider.analyzer.get_docstring(c, mapping[name])
            if doc:
                props[name] = {"description": inspect.cleandoc(doc), **prop}
                break


def tidy(node: Any) -> Any:
    """Docstring indentation out of every description (the analyzer keeps it)."""
    if isinstance(node, dict):
        return {
            k: inspect.cleandoc(v) if k == "description" and isinstance(v, str) else tidy(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [tidy(v) for v in node]
    return node


def schema_text(version: str = "0.0.0") -> str:
    """The package schema as the checked-in package/schema.json holds it."""
    return json.dumps(FleetProvider(version).get_schema(), indent=2, sort_keys=True) + "\n"
