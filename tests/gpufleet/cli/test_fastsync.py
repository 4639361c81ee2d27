"""`sync`'s fast argument parser."""

from __future__ import annotations

from gpufleet.cli import fastsync as sync


def test_parse_fast_takes_the_common_forms_only(tmp_path):
    args = ["sync", "c", "--workdir", str(tmp_path), "--include", "*.so", "--exclude", "d/"]
    assert sync.parse_fast([*args, "--json"]) == {
        "name": "c",
        "workdir": str(tmp_path),
        "include": ["*.so"],
        "exclude": ["d/"],
        "method": "auto",
        "json": True,
    }
    assert sync.parse_fast(["sync", "c", "--workdir=x"]) is None  # typer's job
    assert sync.parse_fast(["sync", "c", "--workdir", str(tmp_path / "missing")]) is None
    assert sync.parse_fast(["sync", "--help"]) is None


def test_the_fast_path_imports_no_typer_rich_pydantic_or_paramiko(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys; from gpufleet.cli import main;"
        "code = main(['sync', 'nope', '--workdir', '.']);"
        "print(code, [m for m in ('typer', 'rich', 'pydantic', 'paramiko') if m in sys.modules])"
    )
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "GPUFLEET_HOME": str(tmp_path), "PYTHONPATH": str(root)}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=60,
    )  # fmt: skip
    assert r.stdout.strip() == "2 []", r.stderr
    assert "no cluster named 'nope'" in r.stderr
