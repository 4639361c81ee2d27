"""The docs site: every CLI command has a section in docs/commands.md, and mkdocs builds strict."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS_MD = ROOT / "docs" / "commands.md"


def cli_commands() -> set[str]:
    """Every command path of the CLI, groups and their subcommands: {"up", "image bake", ...}."""
    from gpufleet.cli import build_command

    found: set[str] = set()

    def walk(command, prefix: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            path = f"{prefix}{name}"
            found.add(path)
            walk(sub, f"{path} ")

    walk(build_command(), "")
    return found


def documented_commands() -> set[str]:
    """The commands docs/commands.md has a heading for (`## gpufleet up`, `#### gpufleet image
    bake`)."""
    heading = re.compile(r"^#{2,6} gpufleet ([a-z][a-z -]*)$", re.M)
    return {m.group(1).strip() for m in heading.finditer(COMMANDS_MD.read_text())}


def test_every_command_has_a_section_in_the_commands_page():
    missing = sorted(cli_commands() - documented_commands())
    assert not missing, f"docs/commands.md has no section for: {missing} (add `### gpufleet CMD`)"


def test_the_commands_page_names_no_command_the_cli_lacks():
    stale = sorted(documented_commands() - cli_commands())
    assert not stale, f"docs/commands.md documents commands the CLI does not have: {stale}"


@pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None,
    reason="mkdocs and mkdocs-material are not installed (pip install -e '.[dev]'); "
    "`make docs` builds the site",
)
def test_the_docs_site_builds_strict(tmp_path):
    """--strict: a link to a missing page or anchor, or a page left out of nav, fails."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "commands" / "index.html").is_file()


def test_every_validator_is_in_the_account_checks_table():
    """docs/validators.md has one row per validator, with its fact and API as the code says."""
    from gpufleet.components.validators import cloud_validators

    text = (ROOT / "docs" / "validators.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    documented = {tuple(c.strip() for c in r.strip("|").split(" | ")[:2]) for r in rows}
    for cloud in ("aws", "gcp", "azure"):
        for v in cloud_validators(cloud):
            assert (v.fact, v.api) in documented, f"{cloud}: {v.fact!r} not in docs/validators.md"


def test_gcp_host_keys_section_says_a_custom_images_instance_configs_is_replaced():
    # google guest-agent README, "Configuration" (read 2026-11-25): settings are read from
    # /etc/default/instance_configs.cfg over instance_configs.cfg.distro; no drop-in folder.
    text = (ROOT / "docs" / "clouds.md").read_text()
    section = text.split("### GCP host keys", 1)[1].split("\n### ", 1)[0]
    assert "written whole" in section and "instance_configs.cfg.distro` still apply" in section
