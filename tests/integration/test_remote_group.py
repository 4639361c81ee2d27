"""The SSH group against real sshd nodes: streaming, cancel, timeouts, unreachable nodes."""

from __future__ import annotations

import threading
import time

import pytest

from gpufleet.core.errors import GroupError, SSHUnreachable
from gpufleet.remote import Group
from tests.integration.conftest import leftovers, requires_sshd

pytestmark = requires_sshd


def test_results_map_and_group_error_carries_every_node(make_sandbox):
    info = make_sandbox("t", 3)
    with Group(info) as g:
        ok = g.run("echo $GPUFLEET_NODE; echo err >&2")
        assert {n: r.stdout.strip() for n, r in ok.items()} == {
            f"node-{i}": f"node-{i}" for i in range(3)
        }
        assert all(r.stderr.strip() == "err" for r in ok.values())
        with pytest.raises(GroupError) as e:
            g.run('[ "$GPUFLEET_NODE" = node-2 ] && exit 4; true')
    assert set(e.value.results) == {"node-0", "node-1", "node-2"}
    assert e.value.first_failed == "node-2" and e.value.first_code == 4
    assert e.value.exit_code == 1  # a node's 4 would read as "did not answer SSH"


def test_stream_is_line_by_line_with_node_names(make_sandbox):
    info = make_sandbox("t", 2)
    seen: list[tuple[str, str, bool]] = []
    with Group(info) as g:
        g.run(
            "printf 'a\\nb\\n'; printf 'partial'; echo oops >&2",
            stream=lambda n, line, err: seen.append((n, line, err)),
        )
    for node in ("node-0", "node-1"):
        assert [(ln, e) for n, ln, e in seen if n == node and not e] == [
            ("a", False),
            ("b", False),
            ("partial", False),
        ]
        assert (node, "oops", True) in seen


def test_put_writes_under_each_workdir(make_sandbox):
    info = make_sandbox("t", 2)
    with Group(info) as g:
        g.put({"sub/dir/f.txt": "content"})
        r = g.run("cat sub/dir/f.txt")
    assert all(x.stdout == "content" for x in r.values())


def test_cancel_kills_the_remote_process_group(make_sandbox):
    info = make_sandbox("t", 2)
    started = threading.Event()
    results = {}
    with Group(info) as g:

        def go():
            results.update(
                g.run("sleep 300 & sleep 300; wait", check=False, stream=lambda *a: None)
            )

        t = threading.Thread(target=go)
        t.start()
        deadline = time.monotonic() + 10
        while len(g._pids) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        started.set()
        t0 = time.monotonic()
        g.cancel()
        t.join(timeout=10)
        assert not t.is_alive()
        assert time.monotonic() - t0 < 6
    assert all(not r.ok for r in results.values())
    assert not leftovers("t")  # both sleeps on both nodes are gone


def test_timeout_kills_and_reports(make_sandbox):
    info = make_sandbox("t", 1)
    with Group(info) as g:
        r = g.run("sleep 60", timeout=0.5, check=False)["node-0"]
    assert r.error and "timed out" in r.error
    assert not leftovers("t")


def test_wait_ready_gives_up_at_the_deadline(make_sandbox):
    info = make_sandbox("t", 1)
    dead = info.model_copy(deep=True)
    dead.nodes[0].ssh_port = 1  # nothing listens there
    t0 = time.monotonic()
    with Group(dead, connect_timeout=0.5) as g, pytest.raises(SSHUnreachable) as e:
        g.wait_ready(timeout=1.0)
    assert time.monotonic() - t0 < 5
    assert "node-0" in e.value.failures
