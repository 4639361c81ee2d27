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
