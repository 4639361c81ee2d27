"""The sync document: workers in node order whatever order the head reported them in."""

from __future__ import annotations

from gpufleet.cli import documents
from gpufleet.sync import SyncReport


def test_sync_lists_workers_in_node_order_and_skipped_sorted():
    report = SyncReport("rsync via head", 3, 30, ["z.log", "a/"], 30, 1.5)
    report.per_node = {"node-10": 7, "node-2": 5}  # as the head's results came back
    doc = documents.sync("c", report, [f"node-{k}" for k in range(11)])
    assert (doc["schema"], doc["kind"], doc["cluster"]) == (1, "sync", "c")
    assert doc["workers"] == [{"name": "node-2", "bytes": 5}, {"name": "node-10", "bytes": 7}]
    assert doc["skipped"] == ["a/", "z.log"]
