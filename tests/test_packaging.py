"""What installs gpufleet: the Pulumi project's requirements and the wheel's package list."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pulumi_project_installs_gpufleet_with_every_cloud_sdk():
    """Pulumi's pip toolchain runs `pip install -r requirements.txt` in the virtualenv of
    Pulumi.yaml (pulumi/pulumi sdk/python/toolchain/pip.go), from the folder it runs in."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"gpufleet[aws,gcp,azure]"} == set(extras["clouds"])
    for req, spec in ((ROOT / "requirements.txt", "-e .[clouds]"),
                      (ROOT / "stacks" / "requirements.txt", "-e ..[clouds]")):  # fmt: skip
        lines = [ln for ln in req.read_text().splitlines() if ln and not ln.startswith("#")]
        assert lines == [spec]


def test_every_python_package_is_listed_for_the_wheel():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    for top, name in (("gpufleet", "gpufleet"), ("components", "gpufleet.components")):
        for init in (ROOT / top).rglob("__init__.py"):
            pkg = ".".join((name, *init.parent.relative_to(ROOT / top).parts))
            assert pkg in listed, f"{pkg} is missing from [tool.setuptools] packages"


def test_the_wheel_installs_one_top_level_package():
    """`components` is a common folder name in Pulumi programs: installed at top level it
    shadowed (or was shadowed by) the user's own, so it installs as gpufleet.components."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert {p.split(".")[0] for p in setuptools["packages"]} == {"gpufleet"}
    assert setuptools["package-dir"]["gpufleet.components"] == "components"
    assert (ROOT / "gpufleet" / "components").resolve() == ROOT / "components"


def _imported_top_level_modules() -> dict[str, str]:
    """Every module name gpufleet's code imports (at any depth), with one file that does."""
    import ast

    found: dict[str, str] = {}
    for top in ("gpufleet", "components"):
        for f in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(), str(f))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], str(f.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_a_declared_dependency():
    """The wheel in a fresh venv failed with `No module named 'click'`: typer stopped
    depending on click, and only another package had installed it here. Every module the
    code imports must come from a distribution pyproject names (required or an extra)."""
    import importlib.metadata as md
    import re
    import sys

    project = PYPROJECT["project"]
    declared = {re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0].lower().replace("_", "-")
                for r in project["dependencies"]
                + [r for rs in project["optional-dependencies"].values() for r in rs]}  # fmt: skip
    provided = md.packages_distributions()
    undeclared = {}
    for module, where in _imported_top_level_modules().items():
        if module in sys.stdlib_module_names or module in ("gpufleet", "components", "__future__"):
            continue
        dists = {d.lower().replace("_", "-") for d in provided.get(module, [])}
        if not dists & declared:
            undeclared[module] = (where, sorted(dists))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"
