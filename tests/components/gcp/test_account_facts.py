"""GCP cloud facts of issue 19 (items 7-14), each from a table written from its cited source;
the GCP validators against a fake account (refuse and pass)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpufleet.components import stackconfig
from gpufleet.components.errors import SpecError
from gpufleet.components.preview import evaluate
from gpufleet.components.validators import AccountError, FakeAccount
from tests.components.stackplans import plan

VM = "gcp:compute/instance:Instance"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
NAT = "gcp:compute/routerNat:RouterNat"
ROOT = Path(__file__).resolve().parents[3]

# DLVM "Choose an image" page, https://cloud.google.com/deep-learning-vm/docs/images (updated
# 2026-04-10, as quoted in ../shared/reference/cloud-gpu-facts.md "Second reviews", read
# 2026-11-25; the page itself could not be fetched from here): families past end of support are
# deprecated and getFromFamily returns none of their images.
DLVM_END_OF_SUPPORT = {"common-cu128-ubuntu-2204-nvidia-570": "2026-04-13"}
# The supported family on the driver branch the recipe pins (580): cloud-gpu-facts.md quotes the
# page as "the supported successor family pairs with driver branch 580" with no end-of-support
# date; the family's exact name is not in that quote (unconfirmed from the page itself).
DLVM_SUPPORTED = {"common-cu129-ubuntu-2204-nvidia-580": "supported, no end date quoted"}

# terraform-provider-google google/services/compute/resource_compute_instance.go at e03b762
# (2026-08-21), read 2026-11-25: which google_compute_instance fields replace the VM.
FORCE_NEW = {
    "scheduling.terminationTime": True,  # "termination_time": {... ForceNew: true ...}
    "labels": False,  # instance labels: no ForceNew, updated in place (setLabels)
    "metadata": False,  # metadata: no ForceNew, updated in place (setMetadata)
}
# Boot disk initialize_params.labels: updated in place through disks.setLabels since v7.3.0
# (commit 4724988 "make label updatable for google_compute_instance under initialize_params",
# 2025-09-11); ForceNew before that.

# https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375afbb44da4b596be314634e7486af4a/
# examples/machine-learning/a3-highgpu-8g/nccl-tests/run-nccl-tests.sh lines 63-65 (HEAD
# 1047080, committed 2026-06-25), read 2026-11-25; examples/gke-a3-highgpu/nccl-config.yaml at the
# same commit (lines 60-61, 70) has the same cores and wait with eth1-4 for the NIC names. The A3
# TCPX environment for VM images that name the GPU NICs enp6s0/enp12s0/enp134s0/enp140s0.
TCPX_ENV = {
    "NCCL_GPUDIRECTTCPX_TX_BINDINGS": "enp6s0:8-21,112-125;enp12s0:8-21,112-125;"
    "enp134s0:60-73,164-177;enp140s0:60-73,164-177",
    "NCCL_GPUDIRECTTCPX_RX_BINDINGS": "enp6s0:22-35,126-139;enp12s0:22-35,126-139;"
    "enp134s0:74-87,178-191;enp140s0:74-87,178-191",
    "NCCL_GPUDIRECTTCPX_PROGRAM_FLOW_STEERING_WAIT_MICROS": "500000",
}

# Real GCE error texts, read 2026-11-25: fastai/course-v3#165 (GPUS_ALL_REGIONS),
# googlefonts/fontbakery-dashboard#81 (ZONE_RESOURCE_POOL_EXHAUSTED); the Spot GPU quota line is
# the same message format with the metric PREEMPTIBLE_NVIDIA_A100_GPUS (unconfirmed verbatim).
ERRORS = {
    "GPUS_ALL_REGIONS": "ERROR: (gcloud.compute.instances.create) Could not fetch resource:\n"
    " - Quota 'GPUS_ALL_REGIONS' exceeded. Limit: 0.0 globally.",
    "ZONE_RESOURCE_POOL_EXHAUSTED": "ZONE_RESOURCE_POOL_EXHAUSTED: The zone "
    "'projects/fontbakery-168509/zones/us-central1-a' does not have enough resources available "
    "to fulfill the request. Try a different zone, or try again later.",
    "PREEMPTIBLE_NVIDIA_A100_GPUS": "googleapi: Error 403: Quota "
    "'PREEMPTIBLE_NVIDIA_A100_GPUS' exceeded.  Limit: 0.0 in region us-central1., quotaExceeded",
}


def _vm_image(p) -> str:
    (image,) = {vm.inputs["bootDisk"]["initializeParams"]["image"] for vm in p.of_type(VM)}
    return image


def test_the_default_image_is_a_supported_family_on_the_pinned_driver_branch():
    """Item 7: not a family past end of support, and the recipe's driver branch is the image's
    (images/steps/10-driver.sh keeps a loaded driver on the pinned branch: no reinstall, no
    reboot)."""
    image = _vm_image(plan("gcp-g2"))
    family = image.rsplit("/family/", 1)[1]
    assert family in DLVM_SUPPORTED, f"{family}: not a family the page lists as supported"
    assert family not in DLVM_END_OF_SUPPORT
    branch = re.search(r"-nvidia-(\d+)$", family).group(1)
    versions = yaml.safe_load((ROOT / "images/versions.yaml").read_text())
    gcp_set = versions["sets"][versions["defaults"]["gcp"]]
    assert gcp_set["driver_branch"]["version"] == branch
    assert gcp_set["driver_version"]["version"].split(".")[0] == branch


def test_a_reservation_brings_its_own_placement_policy():
    """Item 8: a VM consuming a reservation takes the reservation's placement policy; dstack
    sets none of its own then ("Cannot use our own placement policies when provisioning in a
    reservation", dstack src/dstack/_internal/core/backends/gcp/compute.py, read 2026-11-25)."""
    p = plan("gcp-a2", reservation="a2-res", spot=False)
    assert not p.of_type(POLICY)
    assert all(not vm.inputs.get("resourcePolicies") for vm in p.of_type(VM))
    assert plan("gcp-a2").of_type(POLICY), "without a reservation the compact policy stays"


def test_an_existing_network_without_its_subnet_is_refused_naming_subnet_id():
    """Item 9 / finding 8: vpc_id alone built a network of the stack's own and left vpc_id
    unused (network.py takes an existing network only with its subnet); it is refused naming
    the missing field instead."""
    with pytest.raises(SpecError) as e:
        plan("gcp-a2", vpc_id="projects/p/global/networks/shared")
    assert e.value.field == "subnet_id" and "subnet_id" in e.value.fix


# terraform-provider-google, provider/provider.go (the `project` field's DefaultFunc) and the
# Pulumi gcp provider's installation & configuration page (https://www.pulumi.com/registry/
# packages/gcp/installation-configuration/), read 2026-11-25: the provider takes its project
# from its configuration (gcp:project), else from GOOGLE_PROJECT, GOOGLE_CLOUD_PROJECT,
# GCLOUD_PROJECT, CLOUDSDK_CORE_PROJECT, in that order; `gcloud config set project` writes
# gcloud's properties file (cloud.google.com/sdk/gcloud/reference/config/set), no variable.
PROJECT_ORDER = ["gcp:project", "GOOGLE_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT",
                 "CLOUDSDK_CORE_PROJECT"]  # fmt: skip


def test_the_cli_sets_the_project_in_the_providers_order_and_never_over_the_stacks_own():
    """Item 10 / finding 9."""
    from gpufleet.components.registry import provider_config

    spec = stackconfig.spec_from_config(stackconfig.stack_config("gcp-g2"), stack="gcp-g2")
    for k, key in enumerate(PROJECT_ORDER):
        given = {other: f"from-{other}" for other in PROJECT_ORDER[k:]}
        stack = {"gcp:project": given.pop("gcp:project")} if key == "gcp:project" else {}
        got = provider_config(spec, given, stack_config=stack)["gcp:project"]
        assert got == f"from-{key}", (key, got)
    with pytest.raises(SpecError) as e:
        provider_config(spec, {}, stack_config={})
    assert e.value.field == "gcp:project" and "GOOGLE_CLOUD_PROJECT" in e.value.fix
    assert "pulumi config set gcp:project" in e.value.fix
    assert not re.search(r"gcloud config set project`? (does|sets)", e.value.fix)


def test_up_keeps_the_gcp_project_the_stack_already_has(monkeypatch):
    """Finding 9: `up` wrote the environment's project over the stack's own gcp:project."""
    from types import SimpleNamespace

    from gpufleet.provision import pulumi as pp

    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "from-env")
    written: dict = {}
    stack = SimpleNamespace(
        get_all_config=lambda: {"gcp:project": SimpleNamespace(value="the-stacks")},
        set_config=lambda k, v: written.__setitem__(k, v.value),
    )
    spec = stackconfig.spec_from_config(stackconfig.stack_config("gcp-g2"), stack="gcp-g2")
    pp.set_provider_config(stack, spec)
    assert written["gcp:project"] == "the-stacks"


def test_a_ttl_change_touches_only_what_replaces_the_vm_and_deletes_before_creating():
    """Item 11: a TTL change is planned and compared with the provider's table: the expiry is
    on the instance's labels and metadata (in place) and in terminationTime (ForceNew: the VM
    is replaced), never on the boot disk; the replacement deletes first (no double GPU quota);
    no update may stop a GPU node."""
    from gpufleet.clusters.plan import plan_stack
    from gpufleet.components.replacements import covers, diff

    old = plan_stack("gcp-a2")
    new = plan_stack("gcp-a2", overrides={"ttl_minutes": 120})
    vms = [c for c in diff(old["resources"], new["resources"]) if c.type == VM]
    assert len(vms) == old["nodes"]
    for c in vms:
        assert not [p for p in c.paths if p.startswith("bootDisk")], c.paths
        unknown = [p for p in c.paths if not any(covers(f, p) for f in FORCE_NEW)]
        assert not unknown, f"{unknown}: not in the table, add it from the provider source"
        forcing = sorted(
            p for p in c.paths if any(covers(f, p) and FORCE_NEW[f] for f in FORCE_NEW)
        )
        assert c.action == ("replace" if forcing else "update") and list(c.forcing) == forcing
        assert c.order == "delete-then-create"
    for vm in new["resources"]:
        if vm["type"] == VM:
            assert vm["inputs"].get("allowStoppingForUpdate") is False


def test_project_wide_ssh_keys_are_blocked_and_secure_boot_is_off_for_the_dkms_driver():
    """Item 13: without block-project-ssh-keys the guest agent installs every project-wide key
    (compute/docs/connect/restrict-ssh-keys#block-keys). Item 14: Secure Boot loads only signed
    modules (compute/docs/shielded-vm: "Secure Boot ... rejects any components that are not
    properly signed"); the recipe's DKMS-built driver is not."""
    for vm in plan("gcp-a2").of_type(VM):
        assert str(vm.inputs["metadata"]["block-project-ssh-keys"]).upper() == "TRUE"
        assert vm.inputs["shieldedInstanceConfig"]["enableSecureBoot"] is False


# Deep Learning VM, "Create a Deep Learning VM instance from the command line"
# (https://cloud.google.com/deep-learning-vm/docs/cli, GPU section; the same flag in
# drsxr/ml-lessons running_on_gcp.md), read 2026-11-25: metadata install-nvidia-driver=True makes
# the image install the NVIDIA driver itself on first boot. gpufleet's recipe installs and pins
# the driver (images/steps/10-driver.sh), so the image's installer must stay off.
DLVM_DRIVER_INSTALLER_KEY = ("install-nvidia-driver", "True")


def test_the_deep_learning_vm_does_not_install_a_driver_under_the_recipe():
    """Finding 11: two installers on first boot (the DLVM's and 10-driver.sh) race; the key is
    set, and not to the value that turns the image's installer on."""
    key, on = DLVM_DRIVER_INSTALLER_KEY
    for vm in plan("gcp-a2").of_type(VM):
        value = vm.inputs["metadata"].get(key)
        assert value is not None and str(value).lower() != on.lower(), value


def test_the_tcpx_environment_has_the_nic_bindings_and_flow_steering_wait():
    """Item 14: TCPX without the TX/RX CPU bindings and flow-steering wait (Cluster Toolkit)."""
    from gpufleet.components.fabric import nccl_env

    env = nccl_env("tcpx", 2)
    for key, value in TCPX_ENV.items():
        assert env.get(key) == value, key


@pytest.mark.parametrize("code", list(ERRORS))
def test_gce_errors_are_explained_with_their_quota_and_fix(code):
    """Item 14: the raw tail becomes a problem and a fix."""
    from gpufleet.components.registry import explain_failure

    known = explain_failure("gcp", ERRORS[code])
    assert known, code
    problem, fix = known
    if code != "ZONE_RESOURCE_POOL_EXHAUSTED":
        assert "quota" in problem.lower() and "increase" in fix
    else:
        assert "capacity" in problem and "zone" in fix
    if code == "PREEMPTIBLE_NVIDIA_A100_GPUS":
        assert "Spot" in problem and "limit 0.0 in us-central1" in problem


# --- validators against a fake account -------------------------------------------------------

IMAGE = "gcp:compute/getImage:getImage"
CLIENT = "gcp:organizations/getClientConfig:getClientConfig"
QUOTAS = "gcp:cloudquota/getSQuotaInfos:getSQuotaInfos"
ROUTERS = "gcp:compute/getRouters:getRouters"
ROUTER_NAT = "gcp:compute/getRouterNat:getRouterNat"
ROLE = "gcp:projects/getIamCustomRole:getIamCustomRole"


def _quota(
    metric: str, value: float, region: str | None = None, *, where: list[str] | None = None
) -> dict:
    """A quotaInfo in the Cloud Quotas API's shape (cloud.google.com/docs/quotas/reference/rest,
    and the CPUS-per-project-region example of docs/quotas/implement-common-use-cases): the
    metric's quota id is its name with dashes, -per-project(-region); the project default has
    no dimensions and lists the locations it applies to; a region's own value has
    {"region": ...}."""
    scope = "-per-project-region" if region else "-per-project"
    default = {
        "dimensions": {},
        "details": [{"value": str(value)}],
        "applicableLocations": [region] if region else ["global"],
    }
    if where is not None:
        default["applicableLocations"] = where
    return {
        "metric": f"compute.googleapis.com/{metric.lower()}",
        "quotaId": metric.replace("_", "-") + scope,
        "dimensions": ["region"] if region else [],
        "dimensionsInfos": [default],
    }


ROOMY = [
    _quota("NETWORKS", 15),
    _quota("GPUS_ALL_REGIONS", 64),
    _quota("NVIDIA_A100_GPUS", 16, "us-central1"),
    _quota("CPUS", 500, "us-central1"),
]


def _image_ok(args):
    return {"name": "common-cu129-ubuntu-2204-nvidia-580-v20261101", "status": "READY"}


def _missing(what):
    """Not found: live the provider raises (404); the fake answers nothing."""
    return lambda args: {}


def _fails(text: str):
    """An invoke that fails with `text`: the provider's error, as the mock monitor delivers it
    (an answer with a failure makes the invoke raise in the program)."""
    return lambda args: ({}, [("", text)])


def _account(**over):
    invokes = {
        CLIENT: lambda a: {"project": "p"},
        IMAGE: _image_ok,
        QUOTAS: lambda a: {"quotaInfos": ROOMY},
        ROUTERS: lambda a: {"routers": []},
        ROLE: _missing("gpufleet_self_delete"),
    }
    invokes.update(over)
    return FakeAccount(invokes=invokes)


def _run(stack: str, account: FakeAccount, **overrides):
    config = stackconfig.stack_config(stack)
    spec = stackconfig.spec_from_config(config, stack=stack).with_(**{"spot": False, **overrides})
    built = []

    def program():
        built.append(stackconfig.build(spec))
        return stackconfig.exports(built[0])

    return built, evaluate(program, config=stackconfig.pulumi_config(config), account=account)


def _refusal(stack: str, account: FakeAccount, **overrides) -> AccountError:
    with pytest.raises(Exception) as caught:
        _run(stack, account, **overrides)
    err = caught.value
    while not isinstance(err, AccountError) and err.__cause__ is not None:
        err = err.__cause__
    assert isinstance(err, AccountError), repr(caught.value)
    return err


def test_validators_pass_against_a_roomy_account_and_say_what_they_found():
    built, plan_ = _run("gcp-a2", _account())
    facts = {c.fact: c for c in built[0].checks}
    assert all(c.status == "passed" for c in facts.values())
    assert any("READY" in c.detail for c in facts.values())
    assert any("NVIDIA_A100_GPUS 16 >= 16" in c.detail for c in facts.values())
    assert plan_.of_type(VM)


def test_an_image_that_does_not_resolve_is_refused_before_anything():
    family = "projects/deeplearning-platform-release/global/images/family/x"
    err = _refusal("gcp-a2", _account(**{IMAGE: _missing(family)}))
    assert "does not resolve" in err.problem and "supported family" in err.fix


def test_a_gpu_quota_of_zero_is_refused_naming_the_metric_and_region():
    quotas = [q for q in ROOMY if not q["quotaId"].startswith("NVIDIA-A100-GPUS")]
    quotas.append(_quota("NVIDIA_A100_GPUS", 0, "us-central1"))
    err = _refusal("gcp-a2", _account(**{QUOTAS: lambda a: {"quotaInfos": quotas}}))
    assert "NVIDIA_A100_GPUS quota is 0 in us-central1" in err.problem and "needs 16" in err.problem


def test_spot_draws_on_the_preemptible_gpu_quota():
    quotas = [*ROOMY, _quota("PREEMPTIBLE_NVIDIA_A100_GPUS", 8, "us-central1")]
    err = _refusal("gcp-a2", _account(**{QUOTAS: lambda a: {"quotaInfos": quotas}}), spot=True)
    assert "PREEMPTIBLE_NVIDIA_A100_GPUS quota is 8" in err.problem


def test_a_networks_quota_spent_is_refused_with_the_existing_network_as_a_fix():
    quotas = [q for q in ROOMY if not q["quotaId"].startswith("NETWORKS")] + [_quota("NETWORKS", 0)]
    err = _refusal("gcp-a2", _account(**{QUOTAS: lambda a: {"quotaInfos": quotas}}))
    assert "NETWORKS" in err.problem and "vpc_id and subnet_id" in err.fix


EXISTING = {
    "vpc_id": "projects/p/global/networks/shared",
    "subnet_id": "projects/p/regions/us-central1/subnetworks/shared-uc1",
}


def test_an_existing_subnet_without_cloud_nat_is_refused():
    err = _refusal("gcp-a2", _account(), **EXISTING)
    assert "no public Cloud NAT" in err.problem and "public_workers" in err.fix


def _nat_account(host: str, **nat) -> tuple[FakeAccount, list[dict]]:
    """A router with one NAT in `host` on network shared; getRouterNat answers `nat`; the
    routers.list calls' arguments are recorded."""
    asked: list[dict] = []
    full = {"name": "nat1", "type": "PUBLIC", **nat}
    router = {
        "name": "r1",
        "network": f"https://www.googleapis.com/compute/v1/projects/{host}/global/networks/shared",
        "nats": [full],  # as listed; the validator reads each NAT itself
    }

    def routers(args):
        asked.append(args)
        return {"routers": [router] if (args.get("project") or "p") == host else []}

    return _account(**{ROUTERS: routers, ROUTER_NAT: lambda a: full}), asked


def test_an_existing_subnet_with_cloud_nat_passes_and_the_stack_adds_no_nat():
    account, _ = _nat_account("p", sourceSubnetworkIpRangesToNat="ALL_SUBNETWORKS_ALL_IP_RANGES")
    built, p = _run("gcp-a2", account, **EXISTING)
    assert any("Cloud NAT nat1" in c.detail for c in built[0].checks)
    assert not p.of_type(NAT)


# Cloud NAT, https://cloud.google.com/nat/docs/overview and the Router.nats[] reference
# (compute/docs/reference/rest/v1/routers, read 2026-11-25): sourceSubnetworkIpRangesToNat
# LIST_OF_SUBNETWORKS serves only the subnets in nats[].subnetworks[]; type PRIVATE is Private
# NAT (between VPC networks, no internet egress); a Shared VPC's routers are in its host
# project, named in the network's URL.
NAT_SERVES = {
    ("PUBLIC", "LIST_OF_SUBNETWORKS", "shared-uc1"): True,
    ("PUBLIC", "LIST_OF_SUBNETWORKS", "other"): False,
    ("PRIVATE", "ALL_SUBNETWORKS_ALL_IP_RANGES", None): False,
}


@pytest.mark.parametrize("case", list(NAT_SERVES))
def test_a_nat_for_a_list_of_subnets_or_a_private_nat_is_read_exactly(case):
    kind, scope, listed = case
    subnets = [{"name": f"projects/p/regions/us-central1/subnetworks/{listed}"}] if listed else []
    account, _ = _nat_account(
        "p", type=kind, sourceSubnetworkIpRangesToNat=scope, subnetworks=subnets
    )
    if NAT_SERVES[case]:
        built, _ = _run("gcp-a2", account, **EXISTING)
        assert any("shared-uc1 in its LIST_OF_SUBNETWORKS" in c.detail for c in built[0].checks)
    else:
        assert "no public Cloud NAT" in _refusal("gcp-a2", account, **EXISTING).problem


def test_a_shared_vpc_is_asked_in_its_host_project():
    account, asked = _nat_account(
        "host", sourceSubnetworkIpRangesToNat="ALL_SUBNETWORKS_ALL_IP_RANGES"
    )
    shared = {
        "vpc_id": "projects/host/global/networks/shared",
        "subnet_id": "projects/host/regions/us-central1/subnetworks/shared-uc1",
    }
    built, _ = _run("gcp-a2", account, **shared)
    assert [a.get("project") for a in asked] == ["host"]
    assert any("(host, us-central1)" in c.detail for c in built[0].checks)


def _spy_identity(monkeypatch) -> dict:
    """The options and inputs the shared account and role are registered with."""
    import pulumi_gcp as gcp

    seen: dict = {}

    def spy(base, name):
        class Spy(base):
            def __init__(self, rname, *args, opts=None, **kw):
                seen[name] = (opts, kw)
                super().__init__(rname, *args, opts=opts, **kw)

        return Spy

    monkeypatch.setattr(gcp.serviceaccount, "Account", spy(gcp.serviceaccount.Account, "Account"))
    monkeypatch.setattr(
        gcp.projects, "IAMCustomRole", spy(gcp.projects.IAMCustomRole, "IAMCustomRole")
    )
    return seen


LIVE_ROLE = {
    "name": "projects/p/roles/gpufleet_self_delete",
    "deleted": False,
    "permissions": ["compute.instances.delete"],
    "title": "an older title",
}


def test_a_second_cluster_adopts_the_shared_account_and_role_instead_of_creating_them(monkeypatch):
    """Item 12 and finding 6: the account is created with create_ignore_already_exists (an
    existing one is adopted by Create, no import to mismatch, no race between two first `up`s:
    pulumi_gcp serviceaccount.Account, "skip service account creation if a service account with
    the same email already exists"); a live role is imported ignoring the fields a person may
    have edited (Pulumi fails an import whose inputs differ: "inputs to import do not match the
    existing resource"); every cluster keeps both on `down` (retain_on_delete)."""
    seen = _spy_identity(monkeypatch)
    _run("gcp-a2", _account(**{ROLE: lambda a: LIVE_ROLE}))
    account_opts, account_kw = seen["Account"]
    role_opts, _ = seen["IAMCustomRole"]
    assert account_opts.import_ is None and account_kw["create_ignore_already_exists"] is True
    assert role_opts.import_ == "projects/p/roles/gpufleet_self_delete"
    assert {"title", "description", "permissions"} <= set(role_opts.ignore_changes)
    assert account_opts.retain_on_delete and role_opts.retain_on_delete


# --- quotas: what a cluster draws on, from the sources -----------------------------------------

# Compute Engine GPU quotas (https://cloud.google.com/compute/resource-usage#gpu_quota, and the
# Compute API's Quota.metric enum, read 2026-11-25): A3 Mega's H100 Mega GPUs have their own
# metric; A3 High's are NVIDIA_H100_GPUS. Each A3 GPU NIC is on its own VPC (Cluster Toolkit
# a3-highgpu-8g / a3-megagpu-8g blueprints: 4 and 8 GPU networks besides the primary one).
GPU_METRIC = {"a3-highgpu-8g": "NVIDIA_H100_GPUS", "a3-megagpu-8g": "NVIDIA_H100_MEGA_GPUS"}
GPU_NETWORKS = {"a3-highgpu-8g": 4, "a3-megagpu-8g": 8}
A3 = {"image": "projects/p/global/images/family/gpufleet-a3-tcpx"}
A3_ROOMY = [
    _quota("NETWORKS", 15),
    _quota("GPUS_ALL_REGIONS", 64),
    _quota("NVIDIA_H100_GPUS", 16, "us-central1"),
    _quota("NVIDIA_H100_MEGA_GPUS", 16, "us-central1"),
    _quota("CPUS", 500, "us-central1"),
]


def _with(base: list[dict], *quotas: dict) -> FakeAccount:
    ids = {q["quotaId"] for q in quotas}
    infos = [q for q in base if q["quotaId"] not in ids] + list(quotas)
    return _account(**{QUOTAS: lambda a: {"quotaInfos": infos}})


def test_an_existing_network_still_needs_the_a3_gpu_networks():
    """Finding 2: with vpc_id and subnet_id, network.py still builds the GPU NICs' networks."""
    networks = GPU_NETWORKS["a3-highgpu-8g"]
    account = _with(A3_ROOMY, _quota("NETWORKS", networks - 1))
    router = {"name": "r", "network": "projects/p/global/networks/shared", "nats": []}
    account.invokes[ROUTERS] = lambda a: {"routers": [router]}
    err = _refusal("gcp-a3", account, **A3, **EXISTING)
    assert f"NETWORKS quota is {networks - 1} globally" in err.problem
    assert f"needs {networks}" in err.problem and f"its {networks} GPU networks" in err.fix


def test_a3_mega_draws_on_the_h100_mega_quota():
    account = _with(A3_ROOMY, _quota(GPU_METRIC["a3-megagpu-8g"], 0, "us-central1"))
    err = _refusal("gcp-a3", account, instance_type="a3-megagpu-8g", zone="us-central1-a", **A3)
    assert f"{GPU_METRIC['a3-megagpu-8g']} quota is 0 in us-central1" in err.problem


def test_a_quota_the_api_does_not_list_is_said_not_checked():
    """Finding 3: an unlisted metric passed silently."""
    quotas = [q for q in ROOMY if not q["quotaId"].startswith("CPUS")]
    built, _ = _run("gcp-a2", _account(**{QUOTAS: lambda a: {"quotaInfos": quotas}}))
    (quota,) = [c for c in built[0].checks if "quota" in c.fact]
    assert "CPUS not listed: not checked" in quota.detail


# https://cloud.google.com/docs/quotas/implement-common-use-cases and
# https://cloud.google.com/docs/quotas/terminology ("a service-specific dimension, such as
# gpu_family"), read 2026-11-25: the per-family GPU quota and its dimensions.
PER_FAMILY = {"quotaId": "GPUS-PER-GPU-FAMILY-per-project-region", "dims": ["region", "gpu_family"]}


def test_the_per_family_gpu_quota_is_read_when_the_project_has_one():
    per_family = {
        "metric": "compute.googleapis.com/gpus_per_gpu_family",
        "quotaId": PER_FAMILY["quotaId"],
        "dimensions": PER_FAMILY["dims"],
        "dimensionsInfos": [
            {
                "dimensions": {"region": "us-central1", "gpu_family": "NVIDIA_A100"},
                "details": [{"value": "8"}],
                "applicableLocations": ["us-central1"],
            },
            {
                "dimensions": {"region": "us-central1", "gpu_family": "NVIDIA_L4"},
                "details": [{"value": "64"}],
                "applicableLocations": ["us-central1"],
            },
        ],
    }
    err = _refusal("gcp-a2", _with(ROOMY, per_family))
    assert "GPUS-PER-GPU-FAMILY (NVIDIA_A100) quota is 8 in us-central1" in err.problem


def test_a_negative_quota_value_is_unlimited():
    """Cloud Quotas API reference (QuotaDetails.value, read 2026-11-25): -1 means unlimited."""
    built, _ = _run("gcp-a2", _with(ROOMY, _quota("NVIDIA_A100_GPUS", -1, "us-central1")))
    assert any("NVIDIA_A100_GPUS unlimited >= 16" in c.detail for c in built[0].checks)


def test_a_default_for_other_locations_does_not_apply_here():
    """applicableLocations: a dimensions info applies only to the locations it lists."""
    elsewhere = _quota("NVIDIA_A100_GPUS", 0, "us-central1", where=["europe-west4"])
    here = {"dimensions": {}, "details": [{"value": "16"}], "applicableLocations": ["us-central1"]}
    elsewhere["dimensionsInfos"].append(here)
    built, _ = _run("gcp-a2", _with(ROOMY, elsewhere))
    assert any("NVIDIA_A100_GPUS 16 >= 16" in c.detail for c in built[0].checks)


# Terraform provider issue hashicorp/terraform-provider-google#21165 (read 2026-11-25): a
# project where the API is off answers "Cloud Quotas API has not been used in project … before
# or it is disabled" (SERVICE_DISABLED); the API is not enabled by default.
QUOTAS_DISABLED = (
    "googleapi: Error 403: Cloud Quotas API has not been used in project 123 before or it is "
    "disabled. Enable it by visiting https://console.developers.google.com/apis/api/"
    "cloudquotas.googleapis.com/overview?project=123, SERVICE_DISABLED"
)


@pytest.mark.parametrize("text", [QUOTAS_DISABLED, "googleapi: Error 403: PERMISSION_DENIED"])
def test_a_quotas_api_that_cannot_be_asked_skips_the_check_with_the_fix(text):
    built, p = _run("gcp-a2", _account(**{QUOTAS: _fails(text)}))
    (quota,) = [c for c in built[0].checks if "quota" in c.fact]
    assert quota.status == "skipped" and "cloudquotas.googleapis.com" in quota.detail
    assert p.of_type(VM)


# Create and use Spot VMs, https://docs.cloud.google.com/compute/docs/instances/create-use-spot
# ("Before you begin"), read 2026-11-25: "To prevent Spot VMs from consuming your quotas for
# standard VMs' CPUs, GPUs, and disks, consider requesting preemptible quota for Spot VMs":
# without preemptible quota, Spot VMs draw on the standard quota.
SPOT_WITHOUT_PREEMPTIBLE_QUOTA_USES = "standard"


def test_spot_without_preemptible_quota_draws_on_the_standard_quota():
    assert SPOT_WITHOUT_PREEMPTIBLE_QUOTA_USES == "standard"
    built, _ = _run("gcp-a2", _account(), spot=True)  # no PREEMPTIBLE_* listed; standard roomy
    (quota,) = [c for c in built[0].checks if "quota" in c.fact]
    assert "NVIDIA_A100_GPUS 16 >= 16 (PREEMPTIBLE_NVIDIA_A100_GPUS not listed" in quota.detail
    short = _with(ROOMY, _quota("NVIDIA_A100_GPUS", 0, "us-central1"))
    err = _refusal("gcp-a2", short, spot=True)
    assert "NVIDIA_A100_GPUS quota is 0 in us-central1" in err.problem


def test_a_soft_deleted_role_is_not_imported_so_create_undeletes_it(monkeypatch):
    """Finding 5. IAM projects.roles.get answers a role deleted within 7 days with
    "deleted": true (iam/docs/reference/rest/v1/projects.roles, Role.deleted, read 2026-11-25);
    terraform-provider-google's Create of google_project_iam_custom_role undeletes such a role
    (resource_google_project_iam_custom_role.go: Roles.Undelete, read 2026-11-25). Imported, it
    would stay deleted and no node could delete itself."""
    seen = _spy_identity(monkeypatch)
    deleted = {**LIVE_ROLE, "deleted": True}
    built, _ = _run("gcp-a2", _account(**{ROLE: lambda a: deleted}))
    assert seen["IAMCustomRole"][0].import_ is None
    assert any("undeletes it" in c.detail for c in built[0].checks)


def test_a_live_role_without_the_delete_permission_is_refused_with_the_fix():
    """Finding 6: the import ignores permissions, so the validator checks the live role."""
    edited = {**LIVE_ROLE, "permissions": ["compute.instances.get"]}
    err = _refusal("gcp-a2", _account(**{ROLE: lambda a: edited}))
    assert "without compute.instances.delete" in err.problem
    assert "--add-permissions compute.instances.delete" in err.fix


def test_a_role_that_cannot_be_read_is_not_taken_for_absent(monkeypatch):
    """Finding 6: a 403 on projects.roles.get is not "not found" (which would create a role
    that may exist, and fail); it refuses naming the permission to grant."""
    seen = _spy_identity(monkeypatch)
    denied = _fails("googleapi: Error 403: Permission 'iam.roles.get' denied, forbidden")
    err = _refusal("gcp-a2", _account(**{ROLE: denied}))
    assert "cannot read" in err.problem and "iam.roles.get" in err.fix
    assert "IAMCustomRole" not in seen
