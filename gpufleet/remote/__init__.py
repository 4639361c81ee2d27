"""Parallel SSH to a cluster's nodes: pinned host keys, host->result maps, streaming, cancel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.remote.group import Group

__all__ = ["Group"]


def __getattr__(name: str) -> Any:
    # Lazy: a warm `exec` only needs remote.holder, and start-up is most of its time.
    if name == "Group":
        from gpufleet.remote.group import Group

        return Group
    raise AttributeError(name)
