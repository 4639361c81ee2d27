"""known_hosts parsed once per group (re-parsing per connection is O(N^2): see benchmarks)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def host_entry(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def private_port(node: Any) -> int:
    """sshd's port at the node's private address (a recorded view may predate the field)."""
    return getattr(node, "private_ssh_port", None) or node.ssh_port


def load(path: str | Path) -> dict[str, dict[str, set[str]]]:
    """host pattern -> {key type: base64 keys}; plain (unhashed) entries, as gpufleet writes.

    A host may have several keys of one type: while a node's bootstrap host key is being
    replaced, both it and the new key are pinned (either one is the node).
    """
    table: dict[str, dict[str, set[str]]] = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) < 3 or line.lstrip().startswith(("#", "@", "|")):
            continue
        hosts, ktype, b64 = parts[0], parts[1], parts[2]
        for h in hosts.split(","):
            table.setdefault(h, {}).setdefault(ktype, set()).add(b64)
    return table


def render(
    nodes: Iterable[Any], extra: dict[str, str] | None = None, *, public: bool = True
) -> str:
    """Lines pinning each node's host key (and `extra[name]`, a second key) at every address
    it is reached by: its public one (unless public=False), and its private one (through the
    head, hostfiles), each with the port sshd answers on there."""
    extra = extra or {}
    lines = []
    for n in nodes:
        keys = dict.fromkeys(k for k in (n.host_key, extra.get(n.name)) if k)
        at = [(n.public_ip, n.ssh_port)] if public else []
        at.append((n.private_ip, private_port(n)))
        hosts = dict.fromkeys(host_entry(a, port) for a, port in at if a)
        lines += [f"{h} {k}" for h in hosts for k in keys]
    return "\n".join(lines) + "\n"


def write(path: str | Path, text: str) -> None:
    """Replace known_hosts atomically: a reader sees the old or the new file, never half."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
