"""known_hosts parsed once per group (re-parsing per connection is O(N^2): see benchmarks)."""

from __future__ import annotations

from pathlib import Path


def host_entry(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def load(path: str | Path) -> dict[str, dict[str, str]]:
    """host pattern -> {key type: base64 key}; plain (unhashed) entries, as gpufleet writes."""
    table: dict[str, dict[str, str]] = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) < 3 or line.lstrip().startswith(("#", "@", "|")):
            continue
        hosts, ktype, b64 = parts[0], parts[1], parts[2]
        for h in hosts.split(","):
            table.setdefault(h, {})[ktype] = b64
    return table
