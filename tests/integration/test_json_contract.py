"""Every command's --json against its schema in gpufleet/schemas/, on a real sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from tests.integration.conftest import ROOT, gpufleet, requires_sshd, requires_torch

SCHEMAS = ROOT / "gpufleet" / "schemas"
# command (as typed) -> the schema its --json output follows
COVERED = {
    "up": "cluster", "status": "cluster", "list": "cluster-list", "exec": "exec",
    "health": "health", "run": "run", "catalog": "catalog", "plan": "plan",
    "runs": "run-list", "sync": "sync", "image bake": "bake-plan", "attach": "cluster",
}  # fmt: skip


def schemas() -> dict[str, dict]:
    return {
        p.name.removesuffix(".schema.json"): json.loads(p.read_text()) for p in SCHEMAS.iterdir()
    }


def validator(kind: str) -> Draft202012Validator:
    docs = schemas()
    registry = Registry().with_resources(
        (d["$id"], Resource.from_contents(d)) for d in docs.values()
    )
    Draft202012Validator.check_schema(docs[kind])
    return Draft202012Validator(docs[kind], registry=registry)


def check(kind: str, stdout: str) -> dict:
    doc = json.loads(stdout)
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator(kind).iter_errors(doc)]
    assert not errors, f"{kind}: {errors[:5]}"
    assert doc["schema"] == schemas()[kind]["properties"]["schema"]["const"]
    assert doc["kind"] == kind
    return doc


def test_every_json_option_is_covered_by_a_schema():
    from gpufleet.cli import build_command

    def walk(cmd, prefix=()):
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, (*prefix, name))
        if any("--json" in getattr(p, "opts", ()) for p in cmd.params):
            yield " ".join(prefix)

    assert set(walk(build_command())) == set(COVERED)
    assert set(COVERED.values()) | {"node", "dry-run"} == set(schemas())


def test_offline_documents():
    catalog = check("catalog", gpufleet(Path("/nonexistent"), "catalog", "--json").stdout)
    assert len(catalog["instance_types"]) >= 25
    first = gpufleet(Path("/nonexistent"), "plan", "--stack", "aws-p4d", "--json", timeout=180)
    again = gpufleet(Path("/nonexistent"), "plan", "--stack", "aws-p4d", "--json", timeout=180)
    plan = check("plan", first.stdout)
    order = [(r["type"], r["name"]) for r in plan["resources"]]
    assert order == sorted(order)
    assert order == [(r["type"], r["name"]) for r in json.loads(again.stdout)["resources"]]
    dry = gpufleet(
        Path("/nonexistent"),
        *("run", "--cloud", "aws", "-t", "p4d.24xlarge", "--dry-run", "--json"),
        *("--workdir", str(ROOT / "examples"), "--", "train_ddp.py"),
    )
    doc = check("dry-run", dry.stdout)
    assert doc["availability"]["status"] == "not-checked"
    assert plan["availability"]["status"] == "offline"
    bake = gpufleet(
        Path("/nonexistent"), "image", "bake", "--stack", "aws-p4d", "--plan", "--json",
        timeout=180,
    )  # fmt: skip
    assert check("bake-plan", bake.stdout)["outputs"]["expires_at"] == 3 * 3600
    hours = doc["ttl_minutes"] / 60  # run's default --max-duration (24h since the lease)
    assert doc["usd_at_ttl"] == pytest.approx(doc["usd_per_hour"] * hours, abs=0.01)


@requires_sshd
@requires_torch
def test_sandbox_documents(gpufleet_home, tmp_path):
    empty = check("cluster-list", gpufleet(gpufleet_home, "list", "--json").stdout)
    assert empty["clusters"] == []
    assert check("run-list", gpufleet(gpufleet_home, "runs", "--json").stdout)["runs"] == []
    up = gpufleet(gpufleet_home, "up", "--name", "js", "--nodes", "2", "--json")
    try:
        assert up.returncode == 0, up.stderr
        made = check("cluster", up.stdout)
        status = check("cluster", gpufleet(gpufleet_home, "status", "js", "--json").stdout)
        listed = check("cluster-list", gpufleet(gpufleet_home, "list", "--json").stdout)
        # the same node object in every document
        assert made["nodes"][0].keys() == status["nodes"][0].keys()
        assert listed["clusters"][0]["nodes"][1].keys() == status["nodes"][1].keys()
        assert [n["name"] for n in status["nodes"]] == ["node-0", "node-1"]
        assert {n["state"] for n in status["nodes"]} == {"running"}
        # one vocabulary: the cluster is "running" in up, status and list alike
        assert made["state"] == status["state"] == listed["clusters"][0]["state"] == "running"
        ex = check("exec", gpufleet(gpufleet_home, "exec", "js", "--json", "--", "true").stdout)
        assert [n["name"] for n in ex["nodes"]] == ["node-0", "node-1"]
        health = gpufleet(gpufleet_home, "health", "js", "--fabric", "--json", timeout=240)
        assert health.returncode == 0, health.stderr[-2000:]
        assert check("health", health.stdout)["fabric_probe"]["world_size"] == 2
        (tmp_path / "job.sh").write_text("echo hi\n")
        run = gpufleet(
            gpufleet_home,
            *("run", "--cluster", "js", "--json", "--workdir", str(tmp_path)),
            *("--launcher", "none", "--", "sh", "job.sh"),
        )
        assert run.returncode == 0, run.stderr
        doc = check("run", run.stdout)
        assert doc["exit_code"] == 0 and doc["cluster"] == "js" and not doc["created"]
        assert "[node-1] hi" in run.stderr  # node output goes to stderr under --json
        (listed_run,) = check("run-list", gpufleet(gpufleet_home, "runs", "--json").stdout)["runs"]
        assert (listed_run["id"], listed_run["status"]) == (doc["id"], "succeeded")
        assert {k: doc[k] for k in listed_run} == listed_run  # one run, named alike in both
        (tmp_path / ".gitignore").write_text("*.log\n")
        (tmp_path / "run.log").write_text("not copied\n")
        synced = gpufleet(gpufleet_home, "sync", "js", "--workdir", str(tmp_path), "--json")
        assert synced.returncode == 0, synced.stderr
        sync_doc = check("sync", synced.stdout)
        assert sync_doc["cluster"] == "js" and "run.log" in sync_doc["skipped"]
        # the head forwards to each worker under rsync; paramiko copies to every node itself
        want = ["node-1"] if sync_doc["method"] == "rsync via head" else []
        assert [w["name"] for w in sync_doc["workers"]] == want
        # `--workdir=` is not the fast path's form: typer's command prints the same document
        again = gpufleet(gpufleet_home, "sync", "js", f"--workdir={tmp_path}", "--json")
        assert again.returncode == 0, again.stderr
        assert check("sync", again.stdout).keys() == sync_doc.keys()
    finally:
        gpufleet(gpufleet_home, "down", "js")
