"""Help that reads like the tools users know: every option described, no type placeholders."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from gpufleet.cli import build_command


def commands(cmd=None, prefix=()):
    cmd = cmd or build_command()
    yield prefix, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from commands(sub, (*prefix, name))


def cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip


def test_every_option_and_argument_is_described():
    for prefix, cmd in commands():
        for p in cmd.params:
            assert p.help or p.name in ("help",), f"gpufleet {' '.join(prefix)}: {p.name}"


@pytest.mark.parametrize("path", [p for p, _ in commands()], ids=lambda p: " ".join(p) or "root")
def test_help_has_no_type_placeholders(path):
    r = cli(*path, "--help")
    assert r.returncode == 0, r.stderr
    assert not re.search(r"<(str|int|float|path|list\[\w+\])>|\{[A-Za-z_]+\}", r.stdout), r.stdout


def test_root_help_documents_exit_codes_debug_and_version():
    out = cli("--help").stdout
    assert "Exit codes (" in out and "  0  success" in out
    assert "--debug" in out and "--version" in out
    from gpufleet import __version__

    assert cli("--version").stdout.strip() == f"gpufleet {__version__}"


def test_bash_completion_completes_commands_and_options():
    script = cli("completion", "bash")
    assert script.returncode == 0 and "complete -o default -F _gpufleet_completion" in script.stdout
    words = cli(_GPUFLEET_COMPLETE="complete_bash", COMP_WORDS="gpufleet ru", COMP_CWORD="1")
    assert words.stdout.split() == ["run", "runs"]
    opts = cli(_GPUFLEET_COMPLETE="complete_bash", COMP_WORDS="gpufleet run --dry", COMP_CWORD="2")
    assert "--dry-run" in opts.stdout.split()


def test_zsh_and_fish_completion():
    assert "compdef _gpufleet_completion gpufleet" in cli("completion", "zsh").stdout
    assert "complete --command gpufleet" in cli("completion", "fish").stdout
    zsh = cli(_GPUFLEET_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="gpufleet sta")
    assert '"status"' in zsh.stdout
    fish = cli(
        _GPUFLEET_COMPLETE="complete_fish",
        _TYPER_COMPLETE_FISH_ACTION="get-args",
        _TYPER_COMPLETE_ARGS="gpufleet cat",
    )
    assert fish.stdout.startswith("catalog")


def test_unknown_shell_is_refused_with_the_list():
    r = cli("completion", "tcsh")
    assert r.returncode == 2 and "use one of bash, zsh, fish" in r.stderr


def test_every_json_option_names_the_schema_of_what_it_prints():
    """`exec --json` said "node -> result map" for a document whose nodes are a list."""
    from pathlib import Path

    import gpufleet

    schemas = {p.name for p in (Path(gpufleet.__file__).parent / "schemas").glob("*.json")}
    found = 0
    for prefix, cmd in commands():
        for p in cmd.params:
            if "--json" in getattr(p, "opts", ()):
                named = re.findall(r"[\w-]+\.schema\.json", p.help or "")
                assert named and set(named) <= schemas, f"gpufleet {' '.join(prefix)} --json"
                found += 1
    assert found >= 10


def test_runs_help_names_the_columns_the_table_has(gpufleet_home):
    from tests.gpufleet.jobs.test_runs import write_record

    write_record("abc123", status="succeeded", ended_at=1060.0, exit_code=0)
    table = cli("runs", COLUMNS="200").stdout
    header = next(ln for ln in table.splitlines() if "STATUS" in ln).lower()
    said = cli("runs", "--help").stdout.split("List runs:")[1].split(".")[0]
    for word in ("launcher", "cost", "cluster", "nodes", "exit", "status", "restarts"):
        assert (word in said) == (word in header), word
