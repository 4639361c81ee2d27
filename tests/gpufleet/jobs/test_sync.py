"""The sync command's own parts: its fast argument parser."""

from __future__ import annotations

from gpufleet.jobs import sync


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
