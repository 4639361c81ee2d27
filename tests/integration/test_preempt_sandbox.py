"""The sandbox's preemption watchers: a notice for node-1 reaches node-1's ranks only.

Real: the sandbox (sshd nodes on loopback), scripts/preempt_watch.sh started by
LocalProvisioner.up (gpufleet/provision/localpreempt.py), SSH sessions, signals, `down`.
Faked: the AWS metadata service (tests/fakes/metadata.py, IMDSv2 token checks), one per node
under /{node}/, set by GPUFLEET_SANDBOX_METADATA as only tests do.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from gpufleet.clusters import ops
from gpufleet.components import preempt
from gpufleet.core import state
from gpufleet.provision.localprocs import _alive, _cmdline
from gpufleet.remote import Group
from tests.fakes.metadata import FakeMetadata
from tests.integration.conftest import leftovers, requires_sshd

pytestmark = requires_sshd

RANK = (
    "import signal,sys,time\n"
    "def t(*_):\n"
    "    open(sys.argv[1],'w').write(repr(time.time())); sys.exit(143)\n"
    "signal.signal(signal.SIGTERM,t)\n"
    "open(sys.argv[1]+'.ready','w').write('1')\n"
    "time.sleep(300)\n"
)


def _watchers(home: Path, name: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    marker = str(home / "clusters" / name) + "/"
    return [ln for ln in out.splitlines() if "preempt_watch.sh" in ln and marker in ln]


def _wait(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(cond())


def test_notice_for_node_1_sigterms_its_ranks_and_down_leaves_no_watcher(
    make_sandbox, gpufleet_home, monkeypatch, tmp_path
):
    with FakeMetadata() as fake:
        monkeypatch.setenv("GPUFLEET_SANDBOX_METADATA", f"aws={fake.url()}/{{node}}")
        info = make_sandbox("pre", 2)
        watchers = info.provider["preempt"]
        assert sorted(watchers) == ["node-0", "node-1"]
        cdir = str(state.cluster_dir("pre"))
        assert all(_alive(p) and cdir in _cmdline(p) for p in watchers.values())
        # (a watcher's $(...) subshells show its command line too)
        assert {ln.split()[-1] for ln in _watchers(gpufleet_home, "pre")} == set(watchers)

        # a rank on each node, started over SSH, detached from its session
        py = shlex.quote(sys.executable)
        with Group(info) as g:
            g.run(
                {
                    n.name: f"GPUFLEET_RUN_ID=r1 setsid {py} -c {shlex.quote(RANK)} "
                    f"{tmp_path}/{n.name} >/dev/null 2>&1 </dev/null &"
                    for n in info.nodes
                }
            )
            assert _wait(lambda: all((tmp_path / f"{n}.ready").exists() for n in watchers), 20)
            time.sleep(2)  # a few polls of both watchers: no notice, nothing signalled
            assert not (tmp_path / "node-1").exists()

            noticed = fake.preempt("node-1")
            assert _wait(lambda: (tmp_path / "node-1").exists(), 10), "no SIGTERM in 10 s"
            latency = float((tmp_path / "node-1").read_text()) - noticed
            print(f"sandbox aws: node-1's rank got SIGTERM {latency:.2f} s after the notice")
            assert latency < 10
            time.sleep(1.5)
            assert not (tmp_path / "node-0").exists(), "node-0's rank was signalled"

            # what gpufleet reads on the node: node-1 has the notice, node-0 none
            out = g.run(preempt.read_command())
            assert preempt.parse(out["node-1"].stdout)["cloud"] == "aws"
            assert preempt.parse(out["node-0"].stdout) is None and not out["node-0"].stdout

        ops.destroy(state.load("pre"), lambda _m: None)
        assert not _watchers(gpufleet_home, "pre"), "a watcher outlived `down`"
        assert not any(_alive(p) for p in watchers.values())
        assert not leftovers("pre")
