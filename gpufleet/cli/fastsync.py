"""`sync`'s fast path parser: the common argv forms without typer (cli/sync.py imports typer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def parse_fast(args: list[str]) -> dict[str, Any] | None:
    """`sync NAME [--workdir D] [--include P]... [--exclude P]... [--sync-method M] [--json]`
    parsed without typer (~1 s of start-up here); None for anything else."""
    if len(args) < 2 or args[0] != "sync" or args[1].startswith("-"):
        return None
    out: dict[str, Any] = {
        "name": args[1],
        "workdir": ".",
        "include": [],
        "exclude": [],
        "method": "auto",
        "json": False,
    }
    rest = iter(args[2:])
    for a in rest:
        if a == "--json":
            out["json"] = True
            continue
        key = {
            "--workdir": "workdir",
            "--include": "include",
            "--exclude": "exclude",
            "--sync-method": "method",
        }.get(a)
        value = next(rest, None)
        if key is None or value is None:
            return None
        if isinstance(out[key], list):
            out[key].append(value)
        else:
            out[key] = value
    if out["method"] not in ("auto", "rsync", "paramiko") or not Path(out["workdir"]).is_dir():
        return None  # typer reports it
    return out
