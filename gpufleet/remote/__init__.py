"""Parallel SSH to a cluster's nodes: pinned host keys, host->result maps, streaming, cancel."""

from gpufleet.remote.group import Group

__all__ = ["Group"]
