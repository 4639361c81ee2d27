"""Stack files -> ClusterSpec -> GpuFleet: the one reading of stacks/Pulumi.<stack>.yaml."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from gpufleet.components.registry import REGION_KEYS
from gpufleet.components.resources import data_dir

STACKS_DIR = data_dir("stacks")  # the ready stacks this installation ships
# The structured config object holding the ClusterSpec fields, e.g. `gpufleet:cluster: {nodes: 2}`.
CONFIG_NAMESPACE = "gpufleet"
CONFIG_KEY = "cluster"


def search_path(root: Path | None = None) -> list[Path]:
    """Folders a stack file is looked up in: `root` alone when given, else the current
    Pulumi project (its `stackConfigDir`, or the folder itself and its stacks/), then the
    stacks shipped with gpufleet."""
    if root is not None:
        return [root]
    here = Path.cwd()
    dirs = [here, here / "stacks"]
    project = here / "Pulumi.yaml"
    if project.is_file():
        import yaml

        with contextlib.suppress(yaml.YAMLError, OSError, AttributeError, TypeError):
            conf_dir = (yaml.safe_load(project.read_text()) or {}).get("stackConfigDir")
            if conf_dir:
                dirs.insert(0, here / conf_dir)
    dirs.append(STACKS_DIR)
    return list(dict.fromkeys(d.resolve() for d in dirs))


def stack_file(name: str, root: Path | None = None) -> Path:
    """The file of stack `name`: the first `Pulumi.<name>.yaml` on the search path."""
    dirs = search_path(root)
    for d in dirs:
        path = d / f"Pulumi.{name}.yaml"
        if path.is_file():
            return path
    return dirs[0] / f"Pulumi.{name}.yaml"


def stack_names(root: Path | None = None) -> list[str]:
    """Every stack with a file on the search path, sorted."""
    found = {
        p.name[len("Pulumi.") : -len(".yaml")]
        for d in search_path(root)
        for p in d.glob("Pulumi.*.yaml")
    }
    return sorted(found)


def stack_config(name: str, root: Path | None = None) -> dict[str, Any]:
    """The `config:` mapping of a stack file."""
    path = stack_file(name, root)
    if not path.is_file():
        known = ", ".join(stack_names(root)) or "none"
        where = ", ".join(str(d) for d in search_path(root))
        raise SpecError("stack", f"no Pulumi.{name}.yaml in {where}", f"use one of: {known}")
    return parse_stack_yaml(path.read_bytes(), str(path))


def parse_stack_yaml(data: bytes | str, where: str = "stack file") -> dict[str, Any]:
    """The `config:` mapping of a stack file's text; malformed YAML names file, line, column."""
    import yaml

    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        doc = yaml.safe_load(text)
    except UnicodeDecodeError as e:
        raise SpecError(
            "stack", f"{where} is not UTF-8 text ({e.reason})", "save it as UTF-8"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        at = f"{where}:{mark.line + 1}:{mark.column + 1}" if mark else where
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise SpecError(
            "stack", f"{at}: not valid YAML ({problem})", "fix the YAML at that line and column"
        ) from None
    except (ValueError, OverflowError, RecursionError) as e:  # e.g. an int of 5,000 digits
        raise SpecError(
            "stack", f"{where}: a value YAML cannot read ({str(e)[:120]})", "use a sane number"
        ) from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise SpecError(
            "stack",
            f"{where} is a YAML {type(doc).__name__}, not a mapping",
            "write it as `config:` followed by `gpufleet:cluster:` fields",
        )
    config = doc.get("config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise SpecError(
            "config",
            f"in {where} is a {type(config).__name__}, not a mapping",
            "write `config:` with `gpufleet:cluster:` indented below it",
        )
    return {str(k): v for k, v in config.items()}


def spec_from_config(config: dict[str, Any], stack: str = "") -> ClusterSpec:
    """The ClusterSpec in a stack's config; `name` defaults to the stack name."""
    if not isinstance(config, dict):
        raise SpecError(
            "config",
            f"is a {type(config).__name__}, not a mapping",
            "write `config:` with `gpufleet:cluster:` indented below it",
        )
    raw = config.get(f"{CONFIG_NAMESPACE}:{CONFIG_KEY}")
    if not isinstance(raw, dict):
        raise SpecError(
            f"{CONFIG_NAMESPACE}:{CONFIG_KEY}",
            "missing from the stack config",
            "add a `gpufleet:cluster:` mapping with at least cloud, nodes and instance_type",
        )
    fields = {str(k): v for k, v in raw.items()}
    if stack:
        fields.setdefault("name", stack)
    spec = ClusterSpec.from_input(fields)
    _same_region(config, spec)
    return spec


def _same_region(config: dict[str, Any], spec: ClusterSpec) -> None:
    """A provider region that differs from the spec's would put the fleet in another region
    than the one its catalog checks and price were for: an error before anything exists."""
    key = REGION_KEYS.get(spec.cloud)
    provider = config.get(key) if key else None
    if provider and spec.region and str(provider) != spec.region:
        raise SpecError(
            "region",
            f"the stack's {key} is {provider} but gpufleet:cluster.region is {spec.region}",
            f"set {key} and region to the same region",
        )


def spec_from_stack(name: str, root: Path | None = None) -> ClusterSpec:
    return spec_from_config(stack_config(name, root), stack=name)


def pulumi_config(config: dict[str, Any]) -> dict[str, str]:
    """Stack config as the flat string map Pulumi's runtime (and its mocks) takes."""
    import json

    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


def build(spec: ClusterSpec, *, expires_at: int | None = None) -> Any:
    """Declare the spec's fleet component in the current Pulumi program and return it."""
    from gpufleet.components.fleetargs import args_from_spec
    from gpufleet.components.registry import fleet_class

    if expires_at is not None:
        spec = spec.with_(expires_at=expires_at)
    return fleet_class(spec.cloud)(spec.name, args_from_spec(spec))


def exports(fleet: Any) -> dict[str, Any]:
    """The contract outputs of a GpuFleet, as stack exports."""
    from gpufleet.components.contract import OUTPUT_NAMES

    return {k: getattr(fleet, k) for k in OUTPUT_NAMES}
