"""run/exec --image, --runtime, --mount and up --container-image: flags to ContainerSpec, refusals
before anything exists, --dry-run and --json.

Real: the CLI (gpufleet.cli.main, in-process, so `error:`/`fix:` and the exit code are the
user's), ClusterSpec/ContainerSpec validation, the state folder, the JSON schemas. Faked: the
job itself (`run_job`, `JobRequest`, `run_on_nodes`), the provisioner (nothing is booted), and
the command runner of the sandbox's host check: the REAL `gpufleet.jobs.containerhost.check_host`
runs with its `run=` seam injected (the probe's output and the start test's exit status are
faked, this machine's runtime is not asked), so it decides and words the refusal itself.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from gpufleet.cli import main
from gpufleet.components.clusterspec import ContainerSpec
from gpufleet.components.errors import SpecError

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = str(ROOT / "examples")
NGC = "nvcr.io/nvidia/pytorch:25.01-py3"
DIGEST = "sha256:" + "ab" * 32


def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


CRUN = "Error: crun: setrlimit `RLIMIT_NPROC`: Operation not permitted: OCI permission denied"
START = "`podman run --rm --network none --rootfs / true`"


@pytest.fixture
def host(monkeypatch):
    """The real check_host, its command runner injected: records each check's runtime and
    argvs. The probe finds podman (or docker, when that is the one asked for); the start test
    passes, or, with `.broken` set, podman's start exits 126 with crun's error and docker's
    `info` fails."""
    from gpufleet.jobs import containerhost
    from tests.gpufleet.jobs.test_containerhost import _probe_out

    real = containerhost.check_host
    rec = types.SimpleNamespace(calls=[], argvs=[], broken=False)

    def check_host(runtime: str = "auto") -> None:
        rec.calls.append(runtime)
        found = "docker" if runtime == "docker" else "podman"

        def run(argv, **kw):
            rec.argvs.append(argv)
            if argv[:2] == ["sh", "-c"]:  # the probe
                failed = rec.broken and found == "docker"
                out = _probe_out("", "docker:info-failed") if failed else _probe_out(found)
                return types.SimpleNamespace(returncode=0, stdout=out, stderr="")
            err = CRUN if rec.broken else ""
            return types.SimpleNamespace(returncode=126 if err else 0, stdout="", stderr=err)

        real(runtime, run=run)

    monkeypatch.setattr(containerhost, "check_host", check_host)
    return rec


@pytest.fixture
def job(monkeypatch, host):
    """run_job and JobRequest captured: what `run` asked for; nothing runs, nothing is made."""
    import gpufleet.jobs.run as jobrun
    from gpufleet.provision import PROVIDERS

    seen: dict = {}

    def request(**kwargs):
        seen["request"] = kwargs
        return types.SimpleNamespace(**kwargs)

    def run_job(req, progress, printer, on_end):
        seen["on_end"] = on_end
        return 0

    def no_provisioner(*a, **k):
        raise AssertionError("a provisioner was asked for")

    monkeypatch.setattr(jobrun, "JobRequest", request)
    monkeypatch.setattr(jobrun, "run_job", run_job)
    monkeypatch.setattr("gpufleet.provision.for_cloud", no_provisioner)
    monkeypatch.setattr("gpufleet.clusters.ops.for_cloud", no_provisioner)
    assert PROVIDERS["local"].containers == "host"
    return seen


def nothing_created(home: Path) -> bool:
    clusters, runs = home / "clusters", home / "runs"
    return (not clusters.exists() or not any(clusters.iterdir())) and not runs.exists()


def run_args(*flags: str) -> list[str]:
    return ["run", "--workdir", EXAMPLES, *flags, "--", "train_ddp.py"]


def test_image_runtime_and_mounts_reach_the_request_and_the_created_spec(capsys, job, host):
    code, _, err = cli(
        capsys,
        *run_args("--image", "pytorch/pytorch:2.5.1", "--runtime", "podman",
                  "--mount", "/data:/data:ro", "--mount", "/scratch:/scratch"),
    )  # fmt: skip
    assert code == 0, err
    want = ContainerSpec(
        image="docker.io/pytorch/pytorch:2.5.1",
        runtime="podman",
        mounts=["/data:/data:ro", "/scratch:/scratch"],
    )
    req = job["request"]
    assert req["container"] == want
    assert req["spec"].container == want  # known at create time: the nodes can pull at boot
    assert host.calls == ["podman"]  # the sandbox's runtime was checked


def test_without_image_the_request_has_no_container(capsys, job, host):
    code, _, err = cli(capsys, *run_args())
    assert code == 0, err
    assert job["request"]["container"] is None and job["request"]["spec"].container is None
    assert host.calls == []


def test_an_archive_path_is_made_absolute(capsys, job, tmp_path, monkeypatch):
    (tmp_path / "img.tar").write_bytes(b"not checked here: the pull loads it")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, *run_args("--image", "oci-archive:img.tar"))
    assert code == 0, err
    assert job["request"]["container"].image == f"oci-archive:{tmp_path / 'img.tar'}"


def test_an_archive_is_checked_by_the_pulls_own_check(capsys, job, monkeypatch):
    """gpufleet/jobs/pull.py's check_archive is faked here: its answer (path, size) is the
    path the request gets, and it is asked with the flag's name."""
    from gpufleet.components.containerimage import ImageRef
    from gpufleet.jobs import pull

    asked = []

    def check_archive(ref, field="--image"):
        asked.append((ref, field))
        return Path("/srv/images/train.tar"), 123

    monkeypatch.setattr(pull, "check_archive", check_archive)
    code, _, err = cli(capsys, *run_args("--cloud", "vm", "--image", "oci-archive:train.tar"))
    assert code == 0, err
    assert asked == [(ImageRef("oci-archive", path="train.tar"), "--image")]
    assert job["request"]["container"].image == "oci-archive:/srv/images/train.tar"


BAD = [
    (["--image", "Not An/Image"], "--image: 'Not An/Image' is not an image reference"),
    (["--image", ""], "--image: is empty"),
    (["--image", "oci-archive:/nonexistent/x.tar"],
     "--image: oci-archive:/nonexistent/x.tar: /nonexistent/x.tar does not exist on this machine"),
    (["--image", "docker-archive:"], "--image: 'docker-archive:' names no file"),
    (["--image", "busybox", "--runtime", "lxc"],
     "--runtime: 'lxc' is not one of auto, docker, podman"),
    (["--runtime", "podman"], "--runtime: applies to --image only"),
    (["--mount", "/a:/b"], "--mount: applies to --image only"),
    (["--image", "busybox", "--mount", "data:/data"],
     "--mount: 'data:/data' is not SRC:DST[:ro|rw] with absolute paths"),
    (["--image", "busybox", "--mount", "/d:/d:rx"],
     "--mount: '/d:/d:rx' is not SRC:DST[:ro|rw] with absolute paths"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_bad_input_names_the_flag_before_anything_exists(
    capsys, job, host, gpufleet_home, flags, message
):
    code, _, err = cli(capsys, *run_args("--cloud", "vm", *flags))
    assert code == 2, err
    assert f"error: {message}" in err and "  fix: " in err
    assert "request" not in job and nothing_created(gpufleet_home)


def test_the_sandbox_without_a_runtime_is_refused_before_anything_is_created(
    capsys, job, host, gpufleet_home
):
    host.broken = True
    code, _, err = cli(capsys, *run_args("--image", "busybox"))
    assert code == 2, err
    # containerhost.HostCannotRunContainers' own words, from the real check
    assert (
        "error: --image on the sandbox needs docker or podman to start a container on this "
        f"machine, and it cannot: podman: {START} exited 126: {CRUN}" in err
    ), err
    assert "fix: use --cloud vm (its guests run podman), or drop --image" in err
    assert host.calls == ["auto"] and host.argvs[1][-3:] == ["--rootfs", "/", "true"]
    assert "request" not in job and nothing_created(gpufleet_home)
    code, _, err = cli(capsys, "up", "--container-image", "busybox", "--runtime", "docker")
    assert code == 2, err
    assert (
        "error: --image on the sandbox needs docker to start a container on this machine, "
        "and it cannot: docker: `docker info` failed" in err
    ), err
    assert host.calls == ["auto", "docker"] and nothing_created(gpufleet_home)


def test_a_node_provider_never_asks_this_machine(capsys, job, host):
    code, _, err = cli(capsys, *run_args("--cloud", "vm", "--image", "busybox"))
    assert code == 0, err
    assert host.calls == []  # vm: each node's runtime is probed over SSH at run time


@pytest.mark.parametrize(
    ("flags", "pull"),
    [
        (["--cloud", "aws", "-t", "p4d.24xlarge", "--image", NGC],
         "pulled by every node at boot (cloud-init), alongside the driver install"),
        (["--cloud", "vm", "--image", NGC],
         "pulled by every node at boot (cloud-init), alongside the driver install"),
        (["--cloud", "ssh", "--hosts", "10.0.0.1,10.0.0.2", "--image", NGC],
         "pulled by every node in parallel before the job"),
        (["--image", NGC], "pulled on this machine before the job"),
    ],
    ids=["aws", "vm", "ssh", "local"],
)  # fmt: skip
def test_dry_run_says_image_runtime_and_where_it_is_pulled(capsys, job, gpufleet_home, flags, pull):
    code, out, err = cli(capsys, *run_args(*flags, "--dry-run"))
    assert code == 0, err
    assert f"  image      {NGC}\n  runtime    auto\n  pull       {pull}\n" in out
    assert "request" not in job and nothing_created(gpufleet_home)


def test_dry_run_of_an_archive_says_it_goes_through_the_head(capsys, job, tmp_path):
    archive = tmp_path / "img.oci.tar"
    archive.write_bytes(b"x")
    flags = ("--cloud", "vm", "--image", f"docker-archive:{archive}", "--runtime", "podman")
    code, out, _ = cli(capsys, *run_args(*flags, "--dry-run", "--json"))
    assert code == 0
    doc = check("dry-run", out)
    assert (doc["image"], doc["runtime"]) == (f"docker-archive:{archive}", "podman")
    assert doc["pull"] == "archive copied to the head, from it to every node, loaded there"


def test_dry_run_on_an_existing_cluster_says_it_pulls_before_the_job(capsys, job):
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    state.save(cluster(cloud="vm"))
    code, out, err = cli(capsys, *run_args("--cluster", "t", "--image", NGC, "--dry-run"))
    assert code == 0, err
    assert "  pull       pulled by every node in parallel before the job" in out


def schema_validator(kind: str) -> Draft202012Validator:
    docs = [json.loads(p.read_text()) for p in (ROOT / "gpufleet" / "schemas").iterdir()]
    registry = Registry().with_resources((d["$id"], Resource.from_contents(d)) for d in docs)
    (doc,) = (d for d in docs if d["$id"].endswith(f"/{kind}.schema.json"))
    return Draft202012Validator(doc, registry=registry)


def check(kind: str, text: str) -> dict:
    doc = json.loads(text)
    errors = [
        f"{list(e.absolute_path)}: {e.message}" for e in schema_validator(kind).iter_errors(doc)
    ]
    assert not errors, errors
    return doc


def record(**extra):
    """A real RunRecord; `extra`: fields a record carries once the wiring branch adds them."""
    from gpufleet.jobs.runs import RunRecord

    rec = RunRecord(
        id="a1b2c3d4", cluster="t", cloud="vm", nodes=2, launcher="torchrun",
        command=["train_ddp.py"], started_at=1.0, ended_at=2.0, exit_code=0, status="succeeded",
        usd_per_hour=0.0,
    )  # fmt: skip
    if not extra:
        return rec
    return types.SimpleNamespace(as_dict=lambda: {**rec.as_dict(), **extra})


def test_json_result_has_the_image_and_each_nodes_digest(capsys, job):
    code, _, err = cli(capsys, *run_args("--cloud", "vm", "--image", NGC, "--json"))
    assert code == 0, err
    job["on_end"](record(digests={"node-0": DIGEST, "node-1": DIGEST}))
    doc = check("run", capsys.readouterr().out)
    assert doc["image"] == NGC
    assert doc["digests"] == {"node-0": DIGEST, "node-1": DIGEST}


def test_json_result_without_a_container_says_so(capsys, job):
    code, _, _ = cli(capsys, *run_args("--cloud", "vm", "--json"))
    assert code == 0
    job["on_end"](record())
    doc = check("run", capsys.readouterr().out)
    assert (doc["image"], doc["digests"]) == (None, {})


def test_json_result_on_a_cluster_with_a_recorded_container_names_its_image(capsys, job):
    from gpufleet.components.clusterspec import ClusterSpec
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    state.save(cluster(cloud="vm"))
    state.save_spec(
        ClusterSpec.from_input({"name": "t", "cloud": "vm", "container": {"image": NGC}})
    )
    code, _, err = cli(capsys, *run_args("--cluster", "t", "--json"))
    assert code == 0, err
    job["on_end"](record())
    assert check("run", capsys.readouterr().out)["image"] == NGC


def test_a_digest_that_is_not_sha256_breaks_the_schema():
    bad = {"node-0": "latest"}
    from gpufleet.cli import documents

    doc = documents.run(record(digests=bad), created=True, instance_type=None, image=NGC)
    assert list(schema_validator("run").iter_errors(doc))


def test_exec_image_reaches_run_on_nodes(capsys, monkeypatch, host):
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    seen = {}

    def run_on_nodes(
        info, command, nodes, timeout, stream, tree=False, container=None, progress=None
    ):
        seen.update(container=container, command=command)
        return {}

    monkeypatch.setattr("gpufleet.jobs.exec.run_on_nodes", run_on_nodes)
    state.save(cluster(cloud="vm"))
    flags = ("--image", "busybox", "--runtime", "docker", "--mount", "/d:/d:ro")
    code, _, err = cli(capsys, "exec", "t", *flags, "--", "nvidia-smi", "-L")
    assert code == 0, err
    assert seen["container"] == ContainerSpec(
        image="docker.io/library/busybox", runtime="docker", mounts=["/d:/d:ro"]
    )
    assert seen["command"] == ["nvidia-smi", "-L"] and host.calls == []
    seen.clear()
    assert cli(capsys, "exec", "t", "--", "true")[0] == 0
    assert seen["container"] is None  # the fast path: no container asked for


def test_exec_image_on_the_sandbox_is_checked_first(capsys, monkeypatch, host):
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    def run_on_nodes(*a, **k):
        raise AssertionError("ran before the check")

    monkeypatch.setattr("gpufleet.jobs.exec.run_on_nodes", run_on_nodes)
    state.save(cluster(cloud="local"))
    host.broken = True
    code, _, err = cli(capsys, "exec", "t", "--image", "busybox", "--", "true")
    assert code == 2, err
    assert f"and it cannot: podman: {START} exited 126: {CRUN}" in err, err
    assert "fix: use --cloud vm (its guests run podman), or drop --image" in err


def test_up_container_image_is_recorded_in_the_clusters_spec(capsys, monkeypatch, gpufleet_home):
    """`up` -> ops.create (real: the spec recorded in the state folder) with a fake
    provisioner; lifecycle's wait for SSH is skipped (no node exists)."""
    from gpufleet.clusters import ops
    from gpufleet.core import state
    from tests.gpufleet.fakes import cluster

    made = []

    class Provisioner:
        def up(self, spec, progress):
            made.append(spec)
            return cluster(cloud="vm").model_copy(update={"name": spec.name})

    monkeypatch.setattr(ops, "for_cloud", lambda cloud, **o: Provisioner())
    monkeypatch.setattr(
        "gpufleet.clusters.lifecycle.up", lambda spec, progress, **kw: ops.create(spec, progress)
    )
    flags = ("--container-image", NGC, "--runtime", "podman")
    code, _, err = cli(capsys, "up", "--cloud", "vm", "-n", "c1", *flags)
    assert code == 0, err
    want = ContainerSpec(image=NGC, runtime="podman")
    assert made[0].container == want
    assert state.load_spec("c1").container == want  # later runs default to it


def test_up_dry_run_and_bad_container_image(capsys, gpufleet_home):
    code, out, _ = cli(capsys, "up", "--cloud", "aws", "-t", "g5.12xlarge",
                       "--container-image", NGC, "--dry-run", "--json")  # fmt: skip
    assert code == 0
    doc = check("dry-run", out)
    assert (doc["image"], doc["runtime"]) == (NGC, "auto")
    assert doc["pull"].startswith("pulled by every node at boot")
    code, _, err = cli(capsys, "up", "--cloud", "vm", "--container-image", "a b")
    assert code == 2 and "error: --container-image: 'a b' is not an image" in err
    code, _, err = cli(capsys, "up", "--cloud", "vm", "--container-image", "oci-archive:/no.tar")
    assert code == 2 and "error: --container-image: oci-archive:/no.tar: /no.tar does not" in err
    code, _, err = cli(capsys, "up", "--cloud", "vm", "--runtime", "podman")
    assert code == 2 and "error: --runtime: applies to --container-image only" in err
    assert nothing_created(gpufleet_home)


def test_runtimes_are_the_specs_and_the_completions():
    import typing

    from gpufleet.cli import completers
    from gpufleet.cli.container import RUNTIMES

    literal = typing.get_args(ContainerSpec.model_fields["runtime"].annotation)
    assert RUNTIMES == literal == tuple(completers.RUNTIMES)


def test_a_stacks_container_mapping_is_the_specs_container():
    """`container:` under `gpufleet:cluster:`: the commented example in the shipped aws-p4d
    stack, uncommented, gives the cluster a ContainerSpec (boot pull, runs default to it)."""
    from gpufleet.components.stackconfig import parse_stack_yaml, spec_from_config

    text = (ROOT / "stacks" / "Pulumi.aws-p4d.yaml").read_text()
    example = [ln for ln in text.splitlines() if ln.lstrip().startswith("# container:")]
    assert len(example) == 1, "the stack shows one commented container: example"
    assert spec_from_config(parse_stack_yaml(text), "aws-p4d").container is None
    on = text.replace(example[0], example[0].replace("# container:", "container:", 1))
    spec = spec_from_config(parse_stack_yaml(on), "aws-p4d")
    assert spec.container == ContainerSpec(image=NGC)
    bad = on.replace(NGC, "Bad Image")
    with pytest.raises(SpecError, match="container.image: 'Bad Image' is not an image reference"):
        spec_from_config(parse_stack_yaml(bad), "aws-p4d")


def test_exec_image_with_tree_is_a_usage_error_before_anything_runs(capsys, monkeypatch, host):
    """Faked: run_on_nodes (must not be reached), the sandbox's check_host (not asked)."""
    from gpufleet.core import state
    from gpufleet.jobs import exec as jobexec
    from tests.gpufleet.fakes import cluster

    def run_on_nodes(*a, **k):
        raise AssertionError("ran")

    monkeypatch.setattr("gpufleet.jobs.exec.run_on_nodes", run_on_nodes)
    state.save(cluster(cloud="local"))
    code, _, err = cli(capsys, "exec", "t", "--image", "busybox", "--tree", "--", "true")
    print(err)
    assert code == 2 and "--tree is not supported with --image" in err, err
    assert host.calls == []  # refused before this machine's runtime was started
    with pytest.raises(Exception, match="--tree is not supported with --image"):
        jobexec.refuse_tree(True, ContainerSpec(image="busybox"))


def test_registry_id_reaches_the_spec_and_needs_an_image(capsys, job, host):
    """--registry-id (Azure's AcrPull grant, components/azure/pullaccess.py) is the one way the
    CLI can give container.registry_id; without --image it is refused, naming the flag."""
    rid = (
        "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/g/providers/"
        "Microsoft.ContainerRegistry/registries/teamreg"
    )
    code, _, err = cli(
        capsys, *run_args("--image", "teamreg.azurecr.io/train:1", "--registry-id", rid)
    )
    assert code == 0, err
    assert job["request"]["container"].registry_id == rid
    assert job["request"]["spec"].container.registry_id == rid
    code, _, err = cli(capsys, *run_args("--registry-id", rid))
    assert code == 2 and "error: --registry-id: applies to --image only" in err, err
    code, _, err = cli(capsys, *run_args("--image", "teamreg.azurecr.io/t:1", "--registry-id", "x"))
    assert code == 2 and "error: --registry-id:" in err and "fix:" in err, err
