"""down / sweep / extend, name locks and damaged state, on real sandbox clusters."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from gpufleet.core import state
from tests.faults.sandbox import leaks, wait_no_leaks
from tests.integration.conftest import ROOT, cli_env, gpufleet, requires_sshd

pytestmark = requires_sshd


def up(home, name: str, nodes: int = 1) -> None:
    r = gpufleet(home, "up", "--name", name, "--nodes", str(nodes))
    assert r.returncode == 0, r.stderr


def test_down_of_several_names_removes_every_known_one(gpufleet_home):
    up(gpufleet_home, "a")
    up(gpufleet_home, "c")
    r = gpufleet(gpufleet_home, "down", "a", "b", "c")
    assert r.returncode == 2, r.stderr  # b was unknown ...
    assert "no cluster named b" in r.stderr
    assert not leaks(gpufleet_home, "a") and not leaks(gpufleet_home, "c")  # ... a, c went
    r = gpufleet(gpufleet_home, "down", "a")
    assert r.returncode == 0 and "already gone" in r.stderr


def test_down_all_asks_unless_yes(gpufleet_home):
    up(gpufleet_home, "x")
    r = gpufleet(gpufleet_home, "down", "--all", stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--yes" in r.stderr
    assert state.exists("x")
    assert gpufleet(gpufleet_home, "down", "--all", "--yes").returncode == 0
    assert not wait_no_leaks(gpufleet_home, "x")


def test_a_damaged_state_file_is_reported_and_down_still_removes_everything(gpufleet_home):
    up(gpufleet_home, "dmg", 2)
    path = state.cluster_dir("dmg") / "cluster.json"
    for damage in (b"", b'{"name": "dmg", "nodes": [{"na', b"\x00garbage\xff"):
        path.write_bytes(damage)
        r = gpufleet(gpufleet_home, "status", "dmg")
        assert r.returncode == 2 and "damaged" in r.stderr and "fix:" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    listed = json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"]
    assert [(x["name"], x["state"]) for x in listed] == [("dmg", "damaged")]
    r = gpufleet(gpufleet_home, "down", "dmg")
    assert r.returncode == 0, r.stderr
    assert not wait_no_leaks(gpufleet_home, "dmg")
    assert not state.cluster_dir("dmg").exists()


def test_two_ups_of_one_name_at_once_leave_one_cluster_and_nothing_stray(gpufleet_home):
    cmd = [sys.executable, "-m", "gpufleet", "up", "--name", "same", "--nodes", "2"]
    procs = [
        subprocess.Popen(cmd, env=cli_env(gpufleet_home), cwd=ROOT, stderr=subprocess.PIPE,
                         text=True)
        for _ in range(2)
    ]  # fmt: skip
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    refused = next(err for rc, err in results if rc == 2)
    assert "being created" in refused or "already exists" in refused
    assert gpufleet(gpufleet_home, "down", "same").returncode == 0
    assert not wait_no_leaks(gpufleet_home, "same")


def test_sweep_removes_the_cluster_of_a_dead_run_and_keeps_kept_ones(gpufleet_home):
    up(gpufleet_home, "kept")
    run = subprocess.Popen(
        [sys.executable, "-m", "gpufleet", "run", "--name", "orph", "--nodes", "1",
         "--launcher", "none", "--", "sleep 300"],
        env=cli_env(gpufleet_home), cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    for line in run.stderr:
        if "launching" in line:
            break
    run.kill()
    run.wait()
    listed = {
        x["name"]: x["state"]
        for x in json.loads(gpufleet(gpufleet_home, "list", "--json").stdout)["clusters"]
    }
    assert listed == {"kept": "running", "orph": "orphaned"}
    r = gpufleet(gpufleet_home, "sweep")
    assert r.returncode == 0, r.stderr
    assert "orph: its `run` is dead" in r.stderr
    assert not wait_no_leaks(gpufleet_home, "orph")
    assert state.exists("kept")
    assert gpufleet(gpufleet_home, "down", "kept").returncode == 0


def test_extend_moves_the_expiry_the_watchdog_reads(gpufleet_home):
    up(gpufleet_home, "ext")
    try:
        r = gpufleet(gpufleet_home, "extend", "ext", "2d")
        assert r.returncode == 0, r.stderr
        expires = state.load("ext").expires_at
        assert expires and abs(expires - (time.time() + 2 * 86400)) < 600
        written = float((state.cluster_dir("ext") / "expires_at").read_text())
        assert abs(written - expires) < 2
        # and on the node itself, over SSH, where a cloud node's expiry script reads it
        on_node = state.cluster_dir("ext") / "nodes" / "node-0" / "expires_at"
        assert on_node.read_text() == f"{int(expires)}\n"
    finally:
        gpufleet(gpufleet_home, "down", "ext")
