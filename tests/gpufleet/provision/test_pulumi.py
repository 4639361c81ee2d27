"""The Pulumi driver's edges that need no cloud: missing CLI, backend, passphrase, SSH CIDRs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError
from gpufleet.components.exitcodes import ExitCode
from gpufleet.components.registry import provider_config
from gpufleet.provision import pulumi as pp
from tests.integration.conftest import ROOT


def spec(**kw) -> ClusterSpec:
    base = {"name": "t", "cloud": "aws", "nodes": 2, "instance_type": "p4d.24xlarge"}
    return ClusterSpec.from_input({**base, **kw})


@pytest.mark.parametrize("cloud", ["aws", "gcp", "azure"])
def test_up_without_pulumi_cli_is_exit_2_and_records_nothing(gpufleet_home, tmp_path, cloud):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    env = {
        "PATH": str(bindir),  # no pulumi here; python is called by absolute path
        "HOME": str(tmp_path),  # no ~/.pulumi/bin/pulumi either
        "GPUFLEET_HOME": str(gpufleet_home),
    }
    types = {"aws": "p4d.24xlarge", "gcp": "a2-highgpu-8g", "azure": "Standard_ND96asr_v4"}
    r = subprocess.run(
        [sys.executable, "-m", "gpufleet", "up", "--cloud", cloud, "--nodes", "2",
         "--name", "t", "-t", types[cloud], "--ssh-cidr", "203.0.113.0/24"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert "pulumi is not installed" in r.stderr and "get.pulumi.com" in r.stderr
    assert "Traceback" not in r.stderr
    assert list(gpufleet_home.iterdir()) == []


def test_find_pulumi_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(pp.MissingTool) as e:
        pp.find_pulumi()
    assert e.value.exit_code == 2 and "get.pulumi.com" in e.value.install


def test_find_pulumi_finds_the_installer_location(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("HOME", str(tmp_path))
    binary = tmp_path / ".pulumi" / "bin" / "pulumi"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    assert pp.find_pulumi() == str(binary)


def test_backend_defaults_to_a_file_backend_under_gpufleet_home(gpufleet_home, monkeypatch):
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    assert pp.backend_url() == f"file://{gpufleet_home}/pulumi"
    assert (gpufleet_home / "pulumi").is_dir()
    monkeypatch.setenv("PULUMI_BACKEND_URL", "s3://bucket/state")
    assert pp.backend_url() == "s3://bucket/state"
    assert pp.backend_url("gs://other") == "gs://other"


def test_asking_whether_stacks_exist_creates_no_backend_folder(gpufleet_home, monkeypatch):
    monkeypatch.delenv("PULUMI_BACKEND_URL", raising=False)
    assert not pp.may_hold_stacks()
    assert not (gpufleet_home / "pulumi").exists()


def test_list_stacks_asks_for_every_stack_s_outputs_at_once(monkeypatch):
    """LocalWorkspace.stack_outputs runs `pulumi stack output` twice per stack (pulumi's
    automation/_local_workspace.py); a sweep of many stacks asks for them concurrently.
    Each fake call waits at a barrier only concurrent callers can pass."""
    import threading
    from types import SimpleNamespace

    names = ["a", "b", "c"]
    barrier = threading.Barrier(len(names), timeout=60)

    class Workspace:
        def list_stacks(self):
            return [SimpleNamespace(name=f"org/gpufleet/{n}") for n in names]

        def stack_outputs(self, name):
            barrier.wait()
            return {
                "cluster_name": SimpleNamespace(value=f"c-{name}"),
                "expires_at": SimpleNamespace(value=100.0),
            }

    monkeypatch.setattr(pp, "find_pulumi", lambda: "pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda: None)
    monkeypatch.setattr(pp, "_workspace", lambda _b: Workspace())
    got = pp.list_stacks()
    assert [(r.stack, r.cluster, r.expires_at) for r in got] == [
        ("a", "c-a", 100.0),
        ("b", "c-b", 100.0),
        ("c", "c-c", 100.0),
    ]


def test_generated_passphrase_is_private_and_stable(gpufleet_home, monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    first = pp.passphrase()
    path = gpufleet_home / "pulumi-passphrase"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert len(first) >= 32 and pp.passphrase() == first
    monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", "mine")
    assert pp.passphrase() == "mine"


def test_ssh_cidrs_default_to_the_callers_address():
    assert pp.with_ssh_cidrs(spec(), learn=lambda: "198.51.100.7/32").ssh_cidrs == [
        "198.51.100.7/32"
    ]
    given = spec(ssh_cidrs=["203.0.113.0/24"])
    assert pp.with_ssh_cidrs(given, learn=lambda: "198.51.100.7/32") is given


def test_unlearnable_address_never_opens_ssh_to_the_world():
    with pytest.raises(SpecError) as e:
        pp.with_ssh_cidrs(spec(), learn=lambda: None)
    assert e.value.field == "ssh_cidrs" and "--ssh-cidr" in e.value.fix


@pytest.mark.parametrize(
    ("cloud", "it", "key"),
    [("aws", "p4d.24xlarge", "aws:region"), ("gcp", "a2-highgpu-8g", "gcp:region"),
     ("azure", "Standard_ND96asr_v4", "azure-native:location")],
)  # fmt: skip
def test_provider_config_places_the_region(cloud, it, key):
    zone = {"zone": "somewhere-1-b"} if cloud == "gcp" else {}  # GCP: no GPU zone is known there
    env = {"GOOGLE_CLOUD_PROJECT": "p"}  # GCP also needs its project (components/gcp/rules.py)
    cfg = provider_config(spec(cloud=cloud, instance_type=it, region="somewhere-1", **zone), env)
    assert {k: v for k, v in cfg.items() if k != "gcp:project"} == {key: "somewhere-1"}


def test_dynamic_provider_process_loads_the_bake_wait_from_this_checkout(tmp_path, monkeypatch):
    from pathlib import Path

    from pulumi.dynamic.dynamic import serialize_provider

    from gpufleet.components.bake import _BuilderReadyProvider

    monkeypatch.delenv("PULUMI_PYTHON_CMD", raising=False)
    env = pp.workspace_env(f"file://{tmp_path}")
    assert env["PULUMI_PYTHON_CMD"] == sys.executable  # pulumi and paramiko are here
    blob = serialize_provider(_BuilderReadyProvider())  # by reference: module and class name
    # What `$PULUMI_PYTHON_CMD -m pulumi.dynamic` does with it, started in the workspace folder.
    load = (
        "import base64, dill, inspect, sys; "
        "print(inspect.getfile(type(dill.loads(base64.b64decode(sys.argv[1])))))"
    )
    r = subprocess.run(
        [env["PULUMI_PYTHON_CMD"], "-c", load, blob],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": env["PYTHONPATH"]},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).resolve() == Path(ROOT) / "components" / "bake.py"


def test_a_provider_pickled_under_the_old_components_path_still_loads(tmp_path, monkeypatch):
    """pulumi/pulumi#7755: a dynamic provider is pickled by reference (module and class name)
    into the stack's state, so a stack made while the package was `components` names
    `components.bake`; the dynamic-provider process must still find it there."""
    import pickle

    import gpufleet.components.bake as bake

    monkeypatch.setitem(sys.modules, "components.bake", bake)
    monkeypatch.setattr(bake._BuilderReadyProvider, "__module__", "components.bake")
    blob = pickle.dumps(bake._BuilderReadyProvider())
    assert b"components.bake" in blob and b"gpufleet" not in blob
    env = pp.workspace_env(f"file://{tmp_path}")
    load = (
        "import pickle, sys; o = pickle.loads(bytes.fromhex(sys.argv[1])); "
        "print(type(o).__module__, type(o).__name__)"
    )
    r = subprocess.run(
        [env["PULUMI_PYTHON_CMD"], "-c", load, blob.hex()],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": env["PYTHONPATH"]},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["gpufleet.components.bake", "_BuilderReadyProvider"]


def test_workspace_env_keeps_a_python_the_user_chose(tmp_path, monkeypatch):
    monkeypatch.setenv("PULUMI_PYTHON_CMD", "/opt/py/bin/python3")
    monkeypatch.setenv("PYTHONPATH", "/extra")
    env = pp.workspace_env(f"file://{tmp_path}")
    assert env["PULUMI_PYTHON_CMD"] == "/opt/py/bin/python3"
    pickled = os.path.join(ROOT, "gpufleet", "_pickled")
    assert env["PYTHONPATH"].split(os.pathsep) == [pickled, str(ROOT), "/extra"]
    assert env["PULUMI_BACKEND_URL"] == f"file://{tmp_path}" and env["PULUMI_CONFIG_PASSPHRASE"]


class FakeStack:
    """A stack whose `up` fails with the cloud's capacity error in some zones."""

    def __init__(self, zone, outcomes, calls):
        self.zone, self.outcomes, self.calls, self.name = zone, outcomes, calls, "t"
        self.workspace = self

    def set_config(self, *_):
        pass

    def get_all_config(self):
        return {}

    def up(self, **_):
        self.calls.append(("up", self.zone))
        outcome = self.outcomes[self.zone]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def destroy(self, **_):
        self.calls.append(("destroy", self.zone))

    def remove_stack(self, _name):
        pass


def planned_result(s: ClusterSpec):
    from types import SimpleNamespace

    from gpufleet.components import stackconfig
    from gpufleet.components.preview import evaluate

    outputs = evaluate(
        lambda: stackconfig.exports(stackconfig.build(s, expires_at=1_900_000_000)),
        config={"aws:region": "us-east-1"},
    ).outputs
    return SimpleNamespace(outputs={k: SimpleNamespace(value=v) for k, v in outputs.items()})


PUBLISHED_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGssmszZEJr8sA+/nZ2RbsphpLsly3/C7TYAcLU6tZB+"


def run_up(monkeypatch, s: ClusterSpec, outcomes: dict) -> tuple[list, object]:
    calls: list = []
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_stack", lambda sp, _b, _p=None: FakeStack(sp.zone, outcomes, calls))
    # the nodes' published host keys (provision/hostkeypin.py), never a real cloud CLI here
    monkeypatch.setattr(pp.hostkeypin, "require_channel", lambda cloud: None)
    monkeypatch.setattr(
        pp.hostkeypin, "read_keys", lambda c, at, *a, **kw: {n: PUBLISHED_KEY for n in at}
    )
    try:
        return calls, pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    except pp.GpufleetError as e:
        return calls, e


EC2_ICE = Exception(
    "error: creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have "
    "sufficient p4d.24xlarge capacity in the Availability Zone you requested (us-east-1a)."
)


def test_a_zone_without_capacity_is_left_for_the_next_one(gpufleet_home, monkeypatch):
    """EC2 answers InsufficientInstanceCapacity when a zone has no free machines of the type
    right now, and advises another zone, later, or other capacity (EC2 user guide,
    troubleshooting-launch.md "Insufficient instance capacity"; GCE's ZONE_RESOURCE_POOL_
    EXHAUSTED and Azure's ZonalAllocationFailed say the same). So the next zone in `zones` is
    tried after what the first attempt created is destroyed."""
    # zones the mocks' EC2 offers p4d in (components/aws/mocks.py): the plan checks them
    s = spec(zones=["us-east-1d", "us-east-1b"], ssh_cidrs=["203.0.113.7/32"])
    result = planned_result(s)
    calls, info = run_up(monkeypatch, s, {"us-east-1d": EC2_ICE, "us-east-1b": result})
    assert calls == [("up", "us-east-1d"), ("destroy", "us-east-1d"), ("up", "us-east-1b")]
    assert [n.name for n in info.nodes] == ["node-0", "node-1"]
    assert [n.host_key for n in info.nodes] == [PUBLISHED_KEY] * 2  # pinned before any SSH


@pytest.mark.parametrize(
    "text",
    [
        "InsufficientInstanceCapacity: We currently do not have sufficient capacity",
        "googleapi: Error 503: The zone 'projects/p/zones/us-central1-a' does not have enough "
        "resources available to fulfill the request. ZONE_RESOURCE_POOL_EXHAUSTED",
        'Code="ZonalAllocationFailed" Message="Allocation failed. We do not have sufficient '
        'capacity for the requested VM size in this zone."',
    ],
)
def test_no_capacity_anywhere_is_named_plainly_with_what_to_try(gpufleet_home, monkeypatch, text):
    """The three clouds' words for "no machines of this type free in this zone now":
    EC2 InsufficientInstanceCapacity, when AWS does not currently have enough On-Demand
    capacity for the request (aws.amazon.com/premiumsupport/knowledge-center/
    ec2-insufficient-capacity-errors; code listed in EC2 API reference errors-overview.html);
    GCE ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS], "does not have enough resources available
    to fulfill the request" (cloud.google.com/compute/docs/troubleshooting/
    troubleshooting-resource-availability); Azure AllocationFailed or ZonalAllocationFailed,
    "Allocation failed. We do not have sufficient capacity for the requested VM size"
    (learn.microsoft.com/troubleshoot/azure/virtual-machines/windows/allocation-failure). None
    is a quota error, so the advice is other zones, spot or a reservation, not a quota raise."""
    s = spec(zones=["us-east-1a", "us-east-1b"], ssh_cidrs=["203.0.113.7/32"])
    outcomes = {z: Exception("error: " + text) for z in s.zones}
    calls, err = run_up(monkeypatch, s, outcomes)
    assert isinstance(err, pp.CapacityError) and err.zones == ["us-east-1a", "us-east-1b"]
    assert [c for c in calls if c[0] == "destroy"] == [("destroy", z) for z in s.zones]
    assert "no capacity for 2 × p4d.24xlarge in us-east-1a, us-east-1b" in err.message
    assert "zones" in err.hint and "spot" in err.hint and "reservation" in err.hint


def test_other_failures_are_not_retried_in_another_zone(gpufleet_home, monkeypatch):
    """EC2 answers Client.UnauthorizedOperation when the caller's IAM policy does not grant the
    action (EC2 API reference, query-api-troubleshooting.html "Unauthorized operation"): that
    holds in every zone of the account. Only capacity errors, which are per zone (see above),
    are worth another zone, so anything else stops after the first attempt is cleaned up."""
    s = spec(zones=["us-east-1a", "us-east-1b"], ssh_cidrs=["203.0.113.7/32"])
    boom = Exception("UnauthorizedOperation: You are not authorized to perform this operation")
    calls, err = run_up(monkeypatch, s, {"us-east-1a": boom, "us-east-1b": boom})
    assert calls == [("up", "us-east-1a"), ("destroy", "us-east-1a")]
    assert not isinstance(err, pp.CapacityError) and "UnauthorizedOperation" in err.message


# --- `gpufleet extend` on cloud clusters (the nodes are faked; the record is real) ----------

HOUR = 3600


def cloud_record(cloud: str, created: float) -> None:
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    info = cluster(cloud=cloud).model_copy(
        update={
            "name": "c",
            "expires_at": created,
            "provider": {"stack": "c", "created_expires_at": created},
        }
    )
    state.cluster_dir("c").mkdir(parents=True, exist_ok=True)
    state.save(info)


class ConfigStack:
    """A stack as `extend` sees it: only its config (`pulumi config set`)."""

    def __init__(self, name: str, backend: str | None, config: dict) -> None:
        self.name, self.backend, self.config = name, backend, config

    def set_config(self, key: str, value) -> None:
        self.config[key] = value.value


@pytest.fixture
def stack_config(monkeypatch) -> dict:
    """The config `extend` sets on the cluster's stack (no Pulumi CLI here)."""
    config: dict = {}
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda *_: None)
    monkeypatch.setattr(
        pp, "_stack", lambda name, backend, *a, **k: ConfigStack(name, backend, config)
    )
    return config


@pytest.fixture
def node_writes(gpufleet_home, monkeypatch, stack_config):
    """write_node_expiry's calls: (cluster, expires_at); the SSH side is tested on the sandbox."""
    from gpufleet.provision import nodeexpiry

    calls: list[tuple[str, float]] = []
    monkeypatch.setattr(nodeexpiry, "write_node_expiry", lambda i, e: calls.append((i.name, e)))
    return calls


@pytest.mark.parametrize("cloud", ["azure"])  # aws: EventBridge Scheduler caps it (aws/rules.py)
def test_extend_moves_every_nodes_own_expiry_and_the_record(node_writes, cloud, capsys):
    """EC2 and Azure VMs have no lifetime of their own: an EC2 instance runs until it is
    stopped or terminated (the launch template's instance-initiated shutdown behaviour makes
    the node's poweroff a terminate, facts §1.9), and Azure has no VM TTL (facts §3.7). The
    node's own timer is the only expiry, so the new time written to every node is the whole
    extension; the stack and its tags keep the creation-time expiry."""
    import time

    from gpufleet.cli import main
    from gpufleet.core import state

    created = time.time() + 3 * 24 * HOUR  # Azure refuses past its auto-shutdown (azure/rules.py)
    cloud_record(cloud, created)
    assert main(["extend", "c", "2d"]) == 0
    ((name, when),) = node_writes
    assert name == "c" and abs(when - (time.time() + 2 * 86400)) < 600
    info = state.load("c")
    assert info.expires_at == when and info.provider["created_expires_at"] == created
    assert "now expires at" in capsys.readouterr().err


def test_extend_records_the_new_expiry_in_the_stack_the_program_reads(node_writes, stack_config):
    """After the nodes took it, the new expiry goes into the stack's config, where the fleet's
    refusal of an expired cluster reads it (test_pulumi_expiry: a re-apply then keeps them)."""
    import time

    from gpufleet.cli import main
    from gpufleet.components.expiry import EXTENDED_KEY

    cloud_record("azure", time.time() + 3 * 24 * HOUR)
    assert main(["extend", "c", "2d"]) == 0
    ((_, when),) = node_writes
    assert stack_config == {f"gpufleet:{EXTENDED_KEY}": str(int(when))}


def test_extend_past_gces_termination_time_is_refused_before_anything_changes(node_writes, capsys):
    """GCE deletes the VMs at scheduling.terminationTime, and instances.setScheduling "can only
    [be called] on a stopped instance, that is, a VM instance that is in a TERMINATED state"
    (compute/docs/reference/rest/v1/instances/setScheduling): a running VM's termination time
    cannot move. Extending past it would be a promise GCE breaks, so it is refused, with the
    way out, before any node or the record is touched."""
    import time

    from gpufleet.cli import main
    from gpufleet.core import state

    created = time.time() + HOUR
    cloud_record("gcp", created)
    assert main(["extend", "c", "2h"]) == 2
    err = capsys.readouterr().err
    assert "terminationTime" in err and "fix:" in err and "--ttl" in err
    assert "Traceback" not in err
    assert node_writes == [] and state.load("c").expires_at == created


def test_extend_on_gcp_within_its_termination_time_reaches_the_nodes(node_writes):
    """Up to terminationTime the node's own expiry is what ends a GCP cluster (it deletes its
    VM through the Compute API): moving it there is an extension GCE honours."""
    import time

    from gpufleet.cli import main
    from gpufleet.core import state

    created = time.time() + 4 * HOUR
    cloud_record("gcp", created)
    assert main(["extend", "c", "3h"]) == 0
    ((_, when),) = node_writes
    assert when <= created and state.load("c").expires_at == when


def test_a_node_that_missed_the_new_expiry_fails_extend_and_keeps_the_record(
    gpufleet_home, monkeypatch, capsys, stack_config
):
    """A node that did not take the new time still goes at its old one: the record must not
    say otherwise, and the error names the node and says to run extend again."""
    import time

    from gpufleet import remote
    from gpufleet.cli import main
    from gpufleet.core import state

    class HalfGroup:
        def __init__(self, info):
            self.info = info

        def __enter__(self):
            return self

        def __exit__(self, *_):
            return False

        def wait_ready(self, *_a, **_k):
            pass

        def write_expiry(self, when):
            return {"node-0": None, "node-1": "exit 1"}

    monkeypatch.setattr(remote, "Group", HalfGroup)
    created = time.time() + 3 * HOUR  # within it: Azure refuses past its auto-shutdown
    cloud_record("azure", created)
    assert main(["extend", "c", "2h"]) == ExitCode.OPERATION_FAILED  # a step of gpufleet, not a job
    err = capsys.readouterr().err
    assert "node-1: exit 1" in err and "gpufleet extend c" in err and "node-0:" not in err
    assert state.load("c").expires_at == created
    assert stack_config == {}, "the stack says extended only once every node is"


class ProgramStack(FakeStack):
    """A stack whose `up` runs the inline program under mocks, as the Automation API runs it
    in this process; a program that raises fails `up` with the engine's wrapped error."""

    def __init__(self, spec, program, calls, registered):
        super().__init__(spec.zone, {}, calls)
        self.spec, self.program, self.registered = spec, program, registered

    def up(self, **_):
        from gpufleet.components.preview import RecordingMocks, evaluate

        self.calls.append(("up", self.zone))
        original = RecordingMocks.new_resource

        def counting(mocks, args):
            self.registered.append(args.name)
            return original(mocks, args)

        RecordingMocks.new_resource = counting
        try:
            evaluate(lambda: self.program() and None, config={"aws:region": self.spec.region})
        except Exception as e:
            raise RuntimeError(f"error: an unhandled error occurred: program failed: {e}") from None
        finally:
            RecordingMocks.new_resource = original


def test_a_region_without_the_type_fails_up_as_a_spec_error_with_nothing_created(
    gpufleet_home, monkeypatch
):
    """The component asks EC2 (DescribeInstanceTypeOfferings) before registering anything;
    under `gpufleet up` its SpecError reaches the user as `error: region: ...` + fix, exit 2,
    not as the engine's wrapped text, and no zone is retried (no zone can help)."""
    calls: list = []
    registered: list = []
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(
        pp, "_stack", lambda sp, _b, program=None: ProgramStack(sp, program, calls, registered)
    )
    s = spec(instance_type="p5.48xlarge", region="eu-central-1", ssh_cidrs=["203.0.113.7/32"])
    with pytest.raises(SpecError) as e:
        pp.PulumiProvisioner("file:///tmp/x").up(s, lambda _m: None)
    assert e.value.field == "region" and e.value.exit_code == 2
    assert "eu-central-1 does not offer p5.48xlarge" in e.value.problem
    assert registered == []
    assert calls == [("up", None), ("destroy", None)]


def test_a_destroy_error_the_cloud_knows_is_explained_with_its_fix(gpufleet_home, monkeypatch):
    """`down` on Azure can meet NicReservedForAnotherVm (a NIC is held 180 s after its VM is
    deleted): the cloud's rules say to wait and run `down` again, not a raw tail."""
    from gpufleet.core.errors import GpufleetError
    from tests.gpufleet.fakes import cluster

    class Reserved(FakeStack):
        def destroy(self, **_):
            raise Exception("Code=NicReservedForAnotherVm Message=reserved for 180 seconds")

    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda: None)
    monkeypatch.setattr(pp, "_stack", lambda *_a: Reserved(None, {}, []))
    info = cluster(cloud="azure")
    with pytest.raises(GpufleetError) as caught:
        pp.PulumiProvisioner().down(info, lambda _m: None)
    assert "180" in caught.value.message and "gpufleet down" in (caught.value.hint or "")
