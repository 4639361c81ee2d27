"""A built wheel installed into a fresh venv outside the checkout runs every data-reading command.

The wheel is the product a user installs: it must carry images/, scripts/ and the ready
stacks (issue 10 §4: `health`, `image render` and `plan` were broken from a wheel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, requires_sshd

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(out), str(ROOT)],
        check=True,
        cwd=build,
        capture_output=True,
        env={**os.environ, "TMPDIR": str(build)},
    )
    (whl,) = out.glob("gpufleet-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with only the wheel installed in it; the dependencies (paramiko, pydantic,
    pulumi, ...) are read from this interpreter's site-packages through a .pth line, since
    no registry is assumed reachable from a test."""
    v = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(v / "bin" / "python"), "install", "-q"]
        + ["--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        env=_clean_env(),  # a checkout on PYTHONPATH would look installed already
    )
    purelib = subprocess.run(
        [
            str(v / "bin" / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "_gpufleet_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return v


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def gpufleet(venv: Path, cwd: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = _clean_env()
    env.update(GPUFLEET_HOME=str(home), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    return subprocess.run(
        [str(venv / "bin" / "gpufleet"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_wheel_ships_the_data_folders_and_every_package(wheel: Path):
    """Every file of the node recipe, the node scripts and the stacks in git, whatever its
    suffix (images/ttl/gpufleet-expire has none), except the linter's config and the Pulumi
    project's own requirements (caches like .ruff_cache are not in git)."""
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", "images", "scripts", "stacks"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert "images/ttl/gpufleet-expire" in tracked  # the listing itself works
    for f in set(tracked) - {"scripts/ruff.toml", "stacks/requirements.txt"}:
        assert f"gpufleet/components/_shipped/{f}" in names, f
    for pkg, where in (("gpufleet", "gpufleet"), ("components", "gpufleet/components")):
        for f in (ROOT / pkg).rglob("*.py"):
            assert f"{where}/{f.relative_to(ROOT / pkg)}" in names, f"{f} is missing from the wheel"
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {
        "gpufleet"
    }


def test_installed_wheel_reads_its_own_copy_outside_the_checkout(venv: Path, tmp_path: Path):
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import gpufleet, gpufleet.components.resources as r;"
            "print(gpufleet.__file__); print(r.data_dir('scripts'))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=_clean_env(),
        check=True,
    ).stdout.split()
    assert all(p.startswith(str(venv)) for p in where), where


def test_a_users_own_components_folder_neither_shadows_nor_is_shadowed(venv: Path, tmp_path: Path):
    """Many Pulumi programs have a components/ package of their own: gpufleet must run in
    their folder, and their program must import both its own `components` and gpufleet's."""
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "__init__.py").write_text("MINE = True\n")
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "gpufleet", "--version"], cwd=tmp_path, capture_output=True,
                       text=True, env=_clean_env(), timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("0.1.0") and not r.stderr
    both = "import components, gpufleet.components.clusterspec; print(components.MINE)"
    r = subprocess.run([py, "-c", both], cwd=tmp_path, capture_output=True, text=True,
                       env=_clean_env(), timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr


def test_plan_render_catalog_from_the_wheel(venv: Path, tmp_path: Path, gpufleet_home: Path):
    r = gpufleet(venv, tmp_path, gpufleet_home, "plan", "--stack", "aws-p4d", "--json")
    assert r.returncode == 0, r.stderr
    assert "p4d.24xlarge" in r.stdout and json.loads(r.stdout)
    assert f"{venv}" in r.stderr and "Pulumi.aws-p4d.yaml" in r.stderr  # says which file
    r = gpufleet(venv, tmp_path, gpufleet_home, "image", "render", "--stack", "gcp-a3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("#cloud-config")
    r = gpufleet(venv, tmp_path, gpufleet_home, "catalog", "--json")
    assert r.returncode == 0, r.stderr
    assert "p5.48xlarge" in r.stdout and json.loads(r.stdout)


def test_a_stack_in_the_current_directory_wins_and_is_named(
    venv: Path, tmp_path: Path, gpufleet_home: Path
):
    shipped = (ROOT / "stacks" / "Pulumi.aws-g5.yaml").read_text()
    (tmp_path / "Pulumi.aws-g5.yaml").write_text(shipped.replace("nodes: 2", "nodes: 3"))
    r = gpufleet(venv, tmp_path, gpufleet_home, "plan", "--stack", "aws-g5", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["nodes"] == 3  # the local file's count, not the shipped 2
    assert str(tmp_path / "Pulumi.aws-g5.yaml") in r.stderr


@requires_sshd
def test_up_exec_health_down_on_the_sandbox_from_the_wheel(
    venv: Path, tmp_path: Path, gpufleet_home: Path
):
    home = gpufleet_home
    try:
        r = gpufleet(venv, tmp_path, home, "up", "--cloud", "local", "--nodes", "2", "--name", "w")
        assert r.returncode == 0, r.stderr
        r = gpufleet(venv, tmp_path, home, "exec", "w", "--", "echo", "hi")
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.split("\n")[:2]) == ["[node-0] hi", "[node-1] hi"]
        r = gpufleet(venv, tmp_path, home, "health", "w", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "node-1" in r.stdout and json.loads(r.stdout)
    finally:
        r = gpufleet(venv, tmp_path, home, "down", "w")
    assert r.returncode == 0, r.stderr
    assert not (home / "clusters" / "w").exists()
