"""scripts/preempt_watch.sh against fake metadata services: the ranks get SIGTERM on a notice.

Real: the bash watcher, curl, /proc, the signals, and the notice/read lines gpufleet runs on a
node (components/preempt.py). Faked: the clouds' metadata services (tests/fakes/metadata.py),
which check the headers the real ones check. Where `unshare` can make a PID namespace, the
watcher runs in one with the dummy processes, so its "every process with GPUFLEET_RUN_ID"
cannot reach anything else on this machine; elsewhere it is limited by --sandbox/--node.

The clouds' facts, read 2026-11-25:
- AWS: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
  (instance-action with IMDSv2, two minutes ahead, "check ... every 5 seconds");
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
  (a rebalance recommendation: elevated risk, not an interruption).
- GCP: https://cloud.google.com/compute/docs/instances/create-use-spot#handle-preemption
  (instance/preempted, TRUE on preemption; 30 s before the hard power-off);
  https://cloud.google.com/compute/docs/metadata/querying-metadata (wait_for_change, ETag).
- Azure: https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events
  (Preempt: minimum 30 seconds; the first call enables Scheduled Events; Metadata: true).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from gpufleet.components import preempt
from tests.fakes.metadata import FakeMetadata

SCRIPT = Path(preempt.__file__).resolve().parent.parent / "scripts" / "preempt_watch.sh"

# A "rank": records when SIGTERM came, then exits as a checkpointing rank would (143).
RANK = """
import signal, sys, time
out = sys.argv[1]
def term(*_):
    open(out, "w").write(repr(time.time()))
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
open(out + ".ready", "w").write("1")
while True:
    time.sleep(0.05)
"""


def _has_pidns() -> bool:
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(
        ["unshare", "-r", "-p", "-f", "--mount-proc", "true"], capture_output=True, timeout=10
    )
    return r.returncode == 0


PIDNS = _has_pidns()


class Node:
    """The watcher and two dummies (a rank with GPUFLEET_RUN_ID, a bystander without)."""

    def __init__(
        self, tmp: Path, cloud: str, url: str, every: float | None = 1, node_copy: bool = True
    ) -> None:
        self.dir = tmp
        self.state = tmp / "state"
        self.tag = f"t{uuid.uuid4().hex[:8]}"
        marker = f"GPUFLEET_SANDBOX={self.tag} GPUFLEET_NODE=node-1"
        script = SCRIPT
        if node_copy:  # what cloud-init writes on a node (comments and indentation dropped)
            script = tmp / "preempt_watch.sh"
            script.write_text(preempt.node_script(cloud))
        watch = ["bash", str(script), "--cloud", cloud, "--state", str(self.state), "--url", url]
        watch += ["--every", str(every)] if every else []
        if not PIDNS:
            watch += ["--sandbox", self.tag, "--node", "node-1"]
        q = subprocess.list2cmdline
        py = sys.executable
        line = (
            f"env {marker} GPUFLEET_RUN_ID=r1 {py} -c {q([RANK])} {tmp}/rank & "
            f"env {marker} {py} -c {q([RANK])} {tmp}/bystander & "
            f"exec {' '.join(watch)} 2>{tmp}/watch.log"
        )
        argv = ["bash", "-c", line]
        if PIDNS:
            argv = ["unshare", "-r", "-p", "-f", "--mount-proc", *argv]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_")}
        self.proc = subprocess.Popen(argv, env=env, start_new_session=True)
        deadline = time.monotonic() + 20
        while not all((tmp / f"{n}.ready").exists() for n in ("rank", "bystander")):
            assert time.monotonic() < deadline, "dummies did not start"
            time.sleep(0.05)

    def signalled_at(self, who: str = "rank") -> float | None:
        p = self.dir / who
        return float(p.read_text()) if p.exists() and p.read_text() else None

    def wait_signal(self, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if (t := self.signalled_at()) is not None:
                return t
            time.sleep(0.05)
        return None

    def log(self) -> str:
        p = self.dir / "watch.log"
        return p.read_text() if p.exists() else ""

    def stop(self) -> None:
        import contextlib

        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def fake():
    with FakeMetadata(vm_names={"": "gpufleet-c-node-1"}) as f:
        yield f


@pytest.fixture
def node_factory(tmp_path):
    made: list[Node] = []

    def make(*args, **kw) -> Node:
        made.append(Node(tmp_path, *args, **kw))
        return made[-1]

    yield make
    for n in made:
        n.stop()


def _check_notice(node: Node, fake: FakeMetadata, cloud: str, every: float) -> dict:
    time.sleep(2 * every + 1)  # a few polls: nothing yet
    assert node.signalled_at() is None
    assert not (node.state / preempt.NOTICE).exists()
    noticed = fake.preempt()
    got = node.wait_signal(10)
    assert got is not None, f"no SIGTERM within 10 s of the notice; watcher log:\n{node.log()}"
    latency = got - noticed
    print(f"{cloud}: SIGTERM {latency:.2f} s after the notice (poll every {every} s)")
    assert 0 <= latency < 10
    assert node.signalled_at("bystander") is None, "a process without GPUFLEET_RUN_ID was signalled"
    doc = json.loads((node.state / preempt.NOTICE).read_text())
    assert doc["cloud"] == cloud and set(doc) == set(preempt.KEYS)
    assert noticed - 1 <= doc["noticed_at"] <= got
    # notice_command (it blocks until the file exists) and read_command print the MARK line
    env = {**os.environ, "GPUFLEET_STATE_DIR": str(node.state)}
    for cmd in (preempt.notice_command(), preempt.read_command()):
        out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=env, timeout=10)
        assert out.returncode == 0 and out.stdout.startswith(preempt.MARK)
        assert preempt.parse(out.stdout) == doc
    # once: the watcher stays up and signals nothing more
    time.sleep(1.5)
    assert node.proc.poll() is None
    assert node.log().count("SIGTERM sent") == 1
    return doc


def test_aws_spot_instance_action(fake, node_factory):
    node = node_factory("aws", fake.url(), every=1)
    doc = _check_notice(node, fake, "aws", 1)
    assert doc["kind"] == "spot-terminate"
    assert json.loads(doc["detail"])["action"] == "terminate"
    assert doc["not_before"] == pytest.approx(doc["noticed_at"] + 120, abs=3)
    # IMDSv2: every GET carried a token (no 401) and the token came from a PUT
    assert fake.statuses("instance-action") and 401 not in fake.statuses("instance-action")
    assert 200 in fake.statuses("api/token")


def test_aws_default_poll_every_5_s(fake, node_factory):
    """The interval AWS recommends (every 5 s): the ranks still get SIGTERM within 10 s."""
    node = node_factory("aws", fake.url(), every=None)
    _check_notice(node, fake, "aws", 5)


def test_aws_rebalance_is_advisory(fake, node_factory):
    node = node_factory("aws", fake.url(), every=1, node_copy=False)
    fake.rebalance()
    deadline = time.monotonic() + 10
    while not (node.state / preempt.REBALANCE).exists():
        assert time.monotonic() < deadline, node.log()
        time.sleep(0.1)
    time.sleep(2.5)
    assert node.signalled_at() is None, "a rebalance recommendation sent SIGTERM"
    assert not (node.state / preempt.NOTICE).exists()
    assert json.loads((node.state / preempt.REBALANCE).read_text())["kind"] == "rebalance"


def test_gcp_preempted_wait_for_change(fake, node_factory):
    node = node_factory("gcp", fake.url(), every=1)
    doc = _check_notice(node, fake, "gcp", 1)
    assert doc["kind"] == "preempted" and doc["not_before"] is None
    # the watcher waited on the value (hanging GETs), not a poll every second
    waits = [p for _, p, _ in fake.log if "wait_for_change=true" in p]
    assert waits and all("last_etag=" in p for p in waits)


def test_azure_scheduled_events_preempt(fake, node_factory):
    fake.add_other_event("", {"EventId": "x", "EventType": "Preempt", "Resources": ["other-vm"]})
    node = node_factory("azure", fake.url(), every=1)
    doc = _check_notice(node, fake, "azure", 1)
    assert doc["kind"] == "Preempt"
    assert json.loads(doc["detail"])["Resources"] == ["gpufleet-c-node-1"]
    assert doc["not_before"] == pytest.approx(doc["noticed_at"] + 30, abs=3)
    assert fake.state("").scheduled_events_enabled


def test_azure_event_for_another_vm_is_not_ours(fake, node_factory):
    fake.add_other_event("", {"EventId": "x", "EventType": "Preempt", "Resources": ["other-vm"]})
    node = node_factory("azure", fake.url(), every=1)
    time.sleep(4)
    assert node.signalled_at() is None
    assert not (node.state / preempt.NOTICE).exists()


@pytest.mark.parametrize(
    ("path", "method", "headers", "status"),
    [
        ("/latest/api/token", "PUT", {}, 400),  # IMDSv2: a token needs its TTL header
        ("/latest/meta-data/spot/instance-action", "GET", {}, 401),  # no token
        ("/computeMetadata/v1/instance/preempted", "GET", {}, 403),
        ("/metadata/scheduledevents?api-version=2020-07-01", "GET", {}, 400),
        ("/metadata/scheduledevents", "GET", {"Metadata": "true"}, 400),  # no api-version
    ],
)
def test_fake_rejects_what_the_real_service_rejects(fake, path, method, headers, status):
    import urllib.error
    import urllib.request

    req = urllib.request.Request(fake.url() + path, method=method, headers=headers)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == status


def test_watch_command_and_bad_arguments(tmp_path):
    argv = preempt.watch_command("gcp", state_dir="/s", url="http://x", every=2)
    assert argv[-6:] == ["--state", "/s", "--url", "http://x", "--every", "2"]
    with pytest.raises(ValueError):
        preempt.watch_command("local")
    r = subprocess.run(["bash", str(SCRIPT), "--cloud", "vm", "--state", str(tmp_path)])
    assert r.returncode == 2


def test_parse():
    line = preempt.MARK + json.dumps(dict.fromkeys(preempt.KEYS, 1))
    assert preempt.parse(f"noise\n{line}\n") == dict.fromkeys(preempt.KEYS, 1)
    assert preempt.parse("noise") is None
    assert preempt.parse(preempt.MARK + "{not json") is None
    assert preempt.parse(preempt.MARK + '{"cloud": "aws"}') is None
