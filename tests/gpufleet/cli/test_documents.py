"""The --json documents: sync's workers in node order; run and runs name a run's facts alike."""

from __future__ import annotations

import json
from pathlib import Path

from gpufleet.cli import documents
from gpufleet.jobs.sync import SyncReport


def test_sync_lists_workers_in_node_order_and_skipped_sorted():
    report = SyncReport("rsync via head", 3, 30, ["z.log", "a/"], 30, 1.5)
    report.per_node = {"node-10": 7, "node-2": 5}  # as the head's results came back
    doc = documents.sync("c", report, [f"node-{k}" for k in range(11)])
    assert (doc["schema"], doc["kind"], doc["cluster"]) == (1, "sync", "c")
    assert doc["workers"] == [{"name": "node-2", "bytes": 5}, {"name": "node-10", "bytes": 7}]
    assert doc["skipped"] == ["a/", "z.log"]


def validator(kind: str):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    folder = Path(documents.__file__).resolve().parents[1] / "schemas"
    docs = {p.name: json.loads(p.read_text()) for p in folder.glob("*.schema.json")}
    registry = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in docs.values()
    )
    return Draft202012Validator(docs[f"{kind}.schema.json"], registry=registry)


def test_run_is_the_record_runs_lists_plus_what_run_adds():
    from gpufleet.jobs.runs import RunRecord

    rec = RunRecord("r1", "c", "local", 2, "none", ["true"], 100.0, 160.0, 0, "succeeded", 0.0)
    doc = documents.run(rec, created=True, instance_type=None)
    (listed,) = documents.run_list([rec])["runs"]
    assert {k: doc[k] for k in listed} == listed  # same names, same values
    # image and digests: always in run's document; in a record once runs record them
    assert set(doc) - set(listed) - {"image", "digests"} == {
        "schema",
        "kind",
        "created",
        "instance_type",
    }
    assert (doc["image"], doc["digests"]) == (None, {})  # this run had no container
    assert not list(validator("run").iter_errors(doc))
    assert not list(validator("run-list").iter_errors(documents.run_list([rec])))
    # either schema refuses a field it does not name, and run a run that has not ended
    assert list(validator("run").iter_errors({**doc, "run_id": "r1"}))
    assert list(validator("run").iter_errors({**doc, "ended_at": None, "status": "running"}))
    bad_list = documents.run_list([rec])
    bad_list["runs"][0]["wall_seconds"] = 60
    assert list(validator("run-list").iter_errors(bad_list))


def test_a_listed_cluster_is_the_cluster_document_without_its_envelope():
    from tests.gpufleet.fakes import cluster

    one = documents.cluster(cluster(), usd_per_hour=64.0, region="us-east-1")
    listed = documents.envelope("cluster-list", clusters=[one, documents.incomplete("half")])
    assert not list(validator("cluster").iter_errors(documents.envelope("cluster", **one)))
    assert not list(validator("cluster-list").iter_errors(listed))
    assert list(validator("cluster-list").iter_errors({**listed, "clusters": [{**one, "x": 1}]}))
    assert list(validator("cluster").iter_errors(documents.envelope("cluster", **one, x=1)))
    assert list(validator("cluster").iter_errors(one))  # the envelope is required


def test_cluster_state_is_one_vocabulary_for_list_and_status():
    from gpufleet.cli.documents import CLUSTER_STATES, cluster_state

    live = {"readable": True}
    said = [
        (cluster_state(readable=False, creating=True), "creating"),
        (cluster_state(readable=False), "damaged"),
        (cluster_state(**live, orphaned=True, expires_at=1.0, now=2.0), "orphaned"),
        (cluster_state(**live, expires_at=1.0, now=2.0), "expired"),
        (cluster_state(**live), "running"),  # list: no node asked
        (cluster_state(**live, node_states={"node-0": "running", "node-1": "reachable"}),
         "running"),
        (cluster_state(**live, node_states={"node-0": "running", "node-1": "stopped"}),
         "degraded"),
        (cluster_state(**live, node_states={"node-0": "gone", "node-1": "unreachable"}),
         "stopped"),
    ]  # fmt: skip
    assert [got for got, _ in said] == [want for _, want in said]
    assert {want for _, want in said} == set(CLUSTER_STATES)
    enum = json.loads(
        (Path(documents.__file__).parents[1] / "schemas" / "cluster.schema.json").read_text()
    )["$defs"]["cluster"]["properties"]["state"]["enum"]
    assert enum == list(CLUSTER_STATES)
    assert documents.envelope("cluster")["schema"] == 2
    assert documents.envelope("cluster-list")["schema"] == 2
