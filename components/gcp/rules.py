"""GCP's own rules on a spec (zones, labels, placement, TTL, A3 fabric): pure, no SDK import."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

# GCE's limit on a VM's run time, by duration or termination time: 120 days (limit-vm-runtime).
MAX_RUN_MINUTES = 120 * 24 * 60
COMPACT_SERIES = ("a2-", "a3-")
# "Compact placement policies support up to 150 VMs per policy" (placement policies overview,
# cloud.google.com/compute/docs/instances/define-instance-placement). Newer series may allow
# more; refusing above 150 is the safe side of that open question (docs/clouds.md).
COMPACT_MAX_VMS = 150

# Zones that offer each machine series, by region, in the order gpufleet tries them
# (GCE's "GPU regions and zones" page, cloud.google.com/compute/docs/gpus/gpu-regions-zones).
# Not every region has an "-a" zone (us-east1 and europe-west1 start at "-b"), so the default
# comes from this table, never from "<region>-a"; a region missing here needs an explicit zone.
ZONES: dict[str, dict[str, tuple[str, ...]]] = {
    "a3-highgpu": {
        "us-central1": ("us-central1-a", "us-central1-c"),
        "us-east4": ("us-east4-a", "us-east4-b", "us-east4-c"),
        "us-east5": ("us-east5-a",),
        "us-west1": ("us-west1-a", "us-west1-b"),
        "europe-west4": ("europe-west4-b", "europe-west4-c"),
        "asia-southeast1": ("asia-southeast1-b", "asia-southeast1-c"),
    },
    "a3-megagpu": {
        "us-central1": ("us-central1-a", "us-central1-c"),
        "us-east4": ("us-east4-a", "us-east4-b"),
        "us-east5": ("us-east5-a",),
        "us-west1": ("us-west1-a",),
        "europe-west4": ("europe-west4-b",),
        "asia-southeast1": ("asia-southeast1-b",),
    },
    "a2-highgpu": {
        "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
        "us-east1": ("us-east1-b",),
        "us-west1": ("us-west1-b",),
        "us-west4": ("us-west4-b",),
        "europe-west4": ("europe-west4-a", "europe-west4-b"),
        "asia-northeast1": ("asia-northeast1-a", "asia-northeast1-c"),
        "asia-southeast1": ("asia-southeast1-b", "asia-southeast1-c"),
    },
    "a2-ultragpu": {
        "us-central1": ("us-central1-a", "us-central1-c"),
        "us-east4": ("us-east4-c",),
        "us-east5": ("us-east5-b",),
        "europe-west4": ("europe-west4-a",),
        "asia-southeast1": ("asia-southeast1-c",),
    },
    "g2-standard": {
        "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c"),
        "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
        "us-east4": ("us-east4-a", "us-east4-c"),
        "us-west1": ("us-west1-a", "us-west1-b", "us-west1-c"),
        "us-west4": ("us-west4-a", "us-west4-c"),
        "europe-west1": ("europe-west1-b", "europe-west1-c"),
        "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
        "asia-southeast1": ("asia-southeast1-a", "asia-southeast1-b", "asia-southeast1-c"),
    },
    "n1-standard": {  # with T4
        "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
        "us-east1": ("us-east1-c", "us-east1-d"),
        "us-west1": ("us-west1-a", "us-west1-b"),
        "europe-west1": ("europe-west1-b", "europe-west1-c", "europe-west1-d"),
        "europe-west4": ("europe-west4-b", "europe-west4-c"),
    },
}
ZONES["a2-megagpu"] = ZONES["a2-highgpu"]

# GCP labels (cloud.google.com/compute/docs/labeling-resources#requirements): keys and values
# of at most 63 lowercase letters, digits, '_' and '-'; a key starts with a lowercase letter.
_LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_LABEL_BAD = re.compile(r"[^a-z0-9_-]")
# What A3's GPU NICs need that the stock Deep Learning VM image lacks (Cluster Toolkit's
# a3-highgpu / a3-megagpu blueprints; GPUDirect-TCPX(O) docs).
A3_NEEDS = {
    "tcpx": "the linux-gcp-tcpx kernel (or Container-Optimized OS) for GPUDirect-TCPX",
    "tcpxo": "the dmabuf import-helper module and /dev/aperture_devices for GPUDirect-TCPXO",
}


def series(machine_type: str) -> str:
    """`a3-highgpu-8g` -> `a3-highgpu`; `n1-standard-8+t4` -> `n1-standard`."""
    return "-".join(machine_type.split("+")[0].split("-")[:2])


def zones_for(machine_type: str, region: str) -> tuple[str, ...]:
    """The zones of `region` that offer `machine_type`'s series, best first (may be empty)."""
    return ZONES.get(series(machine_type), {}).get(region, ())


def default_zone(machine_type: str, region: str) -> str:
    """The first zone of `region` that offers `machine_type`, from the table; refused if none."""
    offered = zones_for(machine_type, region)
    if not offered:
        raise SpecError(
            "zone",
            f"gpufleet knows no zone of {region} that offers {machine_type}",
            "name the zone (see `gcloud compute accelerator-types list --filter=zone~"
            f"{region}`), or pick a region such as us-central1",
        )
    return offered[0]


def zone_and_region(spec: ClusterSpec) -> tuple[str, str]:
    """The VMs' zone and the subnets' region: the zone from the table when none is given."""
    if spec.zone:
        return spec.zone, spec.region or spec.zone.rsplit("-", 1)[0]
    region = spec.effective_region
    assert region is not None  # gcp has a default region
    return default_zone(spec.instance_type or "", region), region


def termination_time(expires_at: float) -> str:
    """GCE's `scheduling.terminationTime`: RFC 3339 in UTC."""
    return datetime.fromtimestamp(int(expires_at), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# All a node's own service account may do: delete a VM (instances.delete's one permission,
# compute/docs/reference/rest/v1/instances/delete), granted on the cluster's instances only.
SELF_DELETE_PERMISSIONS = ("compute.instances.delete",)

# One account and one custom role per project, kept across clusters (components/gcp/identity.py):
# a role per cluster churned the 300-role limit, since a deleted custom role still counts for
# 7 days (iam projects.roles.delete), and an account per cluster the 100-account default.
NODE_ACCOUNT_ID = "gpufleet-nodes"  # 6-30 of [a-z0-9-] (iam projects.serviceAccounts.create)
SELF_DELETE_ROLE_ID = "gpufleet_self_delete"  # 3-64 of [a-zA-Z0-9_.] (iam projects.roles.create)

# The default boot image: a Deep Learning VM family, named (not resolved) so a later image of the
# family does not replace the VMs. The 570 family reached end of support on 2026-04-13 (DLVM
# "Choose an image"); its successor pairs CUDA 12.9 with driver branch 580, the branch
# images/versions.yaml pins for gcp, so the recipe keeps the image's driver (10-driver.sh).
DLVM_PROJECT = "deeplearning-platform-release"
DLVM_FAMILY = "common-cu129-ubuntu-2204-nvidia-580"
DLVM_IMAGE = f"projects/{DLVM_PROJECT}/global/images/family/{DLVM_FAMILY}"

# Where the provider and gcloud read the project from, in the provider's order.
PROJECT_ENV = ("GOOGLE_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT")


def project_from_env(env: dict[str, str]) -> str:
    """The project the CLI's stack sets as gcp:project; refused with the fix when none is set."""
    for key in PROJECT_ENV:
        if env.get(key):
            return env[key]
    raise SpecError(
        "gcp:project",
        "no Google Cloud project is set, so GCE would not know where to create the cluster",
        "`pulumi config set gcp:project <id>` on the stack, or export GOOGLE_CLOUD_PROJECT=<id> "
        "(or GOOGLE_PROJECT, GCLOUD_PROJECT, CLOUDSDK_CORE_PROJECT); `gcloud config set project` "
        "writes gcloud's own properties file, which the provider does not read",
    )


def image_family(image: str) -> tuple[str, str] | None:
    """(project, family) of a `projects/P/global/images/family/F` reference, else None."""
    m = re.fullmatch(
        r"(?:https://www\.googleapis\.com/compute/v1/)?projects/([^/]+)/global/images/family/([^/]+)",
        image,
    )
    return (m.group(1), m.group(2)) if m else None


def image_name(image: str) -> tuple[str, str] | None:
    """(project, name) of a `projects/P/global/images/N` reference, else None."""
    m = re.fullmatch(
        r"(?:https://www\.googleapis\.com/compute/v1/)?projects/([^/]+)/global/images/([^/]+)",
        image,
    )
    return (m.group(1), m.group(2)) if m else None


# Compute Engine quota metrics of each GPU (compute/docs/gpus: NVIDIA_<model>_GPUS per region, a
# PREEMPTIBLE_ twin for Spot VMs), by the model names of components/catalog.yaml.
GPU_QUOTA = {
    "A100-SXM4-40GB": "NVIDIA_A100_GPUS",
    "A100-SXM4-80GB": "NVIDIA_A100_80GB_GPUS",
    "H100-SXM5-80GB": "NVIDIA_H100_GPUS",
    "L4-24GB": "NVIDIA_L4_GPUS",
    "T4-16GB": "NVIDIA_T4_GPUS",
    "V100-SXM2-16GB": "NVIDIA_V100_GPUS",
}


# A3 Mega's GPUs draw on their own quota metric, not NVIDIA_H100_GPUS (Compute Engine GPU quotas:
# "NVIDIA_H100_MEGA_GPUS"); a machine type listed here wins over its GPU model.
GPU_QUOTA_BY_MACHINE = {"a3-megagpu-": "NVIDIA_H100_MEGA_GPUS"}


def gpu_quota_metric(gpu_model: str, spot: bool, machine: str = "") -> str | None:
    """The regional quota metric a cluster of `machine`/`gpu_model` GPUs draws on (None: not
    known); PREEMPTIBLE_ for Spot."""
    metric = next((m for p, m in GPU_QUOTA_BY_MACHINE.items() if machine.startswith(p)), None)
    metric = metric or GPU_QUOTA.get(gpu_model)
    if metric is None:
        return None
    return f"PREEMPTIBLE_{metric}" if spot else metric


# Errors GCE returns through the provider, and what to do; matched on the error's text.
_FAILURES: tuple[tuple[str, str, str], ...] = (
    (
        "GPUS_ALL_REGIONS",
        "the project's GPUS_ALL_REGIONS quota (GPUs across all regions) is too low; "
        "new projects often have 0",
        "request an increase of 'GPUs (all regions)' in the console's Quotas page "
        "(IAM & Admin > Quotas), then retry",
    ),
    (
        "PREEMPTIBLE_NVIDIA_",
        "the region's Spot (preemptible) GPU quota for this GPU is too low",
        "request an increase of the region's 'Preemptible NVIDIA ... GPUs' quota, or run "
        "without spot in a region that has on-demand quota",
    ),
    (
        "ZONE_RESOURCE_POOL_EXHAUSTED",
        "the zone has no capacity for this machine type right now (not a quota: GCE is out of it)",
        "retry later, give other zones (`zones: [...]`), or use a reservation",
    ),
    (
        "QUOTA_EXCEEDED",
        "a Compute Engine quota of the project is too low for this cluster (the metric is "
        "named in the error)",
        "request an increase of the named quota in the console's Quotas page, or ask for "
        "fewer nodes",
    ),
)


_QUOTA = re.compile(
    r"Quota '([A-Z0-9_]+)' exceeded\.\s*Limit: ([0-9.]+)(?: in region ([a-z0-9-]+))?"
)


def explain_failure(text: str) -> tuple[str, str] | None:
    """(problem, fix) for a GCE error the provider passed on, by its code; else None."""
    quota = _QUOTA.search(text)
    for code, problem, fix in _FAILURES:
        if code in text or (code == "QUOTA_EXCEEDED" and (quota or "quotaExceeded" in text)):
            if quota:
                where = f" in {quota.group(3)}" if quota.group(3) else ""
                problem += f" ({quota.group(1)}: limit {quota.group(2)}{where})"
            return problem, fix
    return None


def refuse_extension(termination: float, wanted: float) -> tuple[str, str] | None:
    """(problem, fix) when `wanted` is past the VMs' terminationTime (`termination`), else None.

    GCE changes a VM's scheduling, terminationTime included, only while it is stopped:
    "You can only call this method on a stopped instance, that is, a VM instance that is in a
    TERMINATED state" (compute/docs/reference/rest/v1/instances/setScheduling). Stopping a GPU
    node ends its job, drops its local SSD data and may not get its capacity back, so gpufleet
    does not move it: GCE deletes the VMs at that time whatever the nodes are told.
    """
    if wanted <= termination:
        return None
    when = termination_time(termination).replace("T", " ").replace("Z", " UTC")
    return (
        f"GCE deletes its VMs at their terminationTime, {when}, which cannot move while "
        "they run (instances.setScheduling takes only a stopped VM)",
        f"extend to at most {when}, or re-create the cluster with a longer --ttl",
    )


def labels(tags: dict[str, Any]) -> dict[str, Any]:
    """GCP labels from tags: keys lowercased, refused when GCE would refuse or merge them.

    A value that is not a str (an Output: the expiry's epoch seconds, all digits) is kept as is.
    """
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for key, value in tags.items():
        k = key.lower()
        if not _LABEL_KEY.match(k):
            raise SpecError(
                "tags",
                f"{key!r} is not a valid GCP label key",
                "use 1-63 lowercase letters, digits, '_' or '-', starting with a letter",
            )
        if k in out:
            raise SpecError(
                "tags",
                f"{origin[k]!r} and {key!r} are the same GCP label key ({k!r})",
                "keep one of them; GCP label keys are lowercase",
            )
        if isinstance(value, str):
            value = _LABEL_BAD.sub("_", value.lower())[:63]
        out[k], origin[k] = value, key
    return out


def check_spec(spec: ClusterSpec) -> None:
    """What only the component checks: ssh_cidrs, which the CLI fills in after the spec is
    made (ClusterSpec's validation ran spec_rules)."""
    if not spec.ssh_cidrs:
        # An ingress firewall without source ranges or tags admits 0.0.0.0/0
        # (hashicorp/terraform-provider-google#6789), so an empty list would open SSH to all.
        raise SpecError(
            "ssh_cidrs",
            "is empty; on GCP a firewall rule without sources admits every address",
            "list the addresses allowed to SSH, e.g. ssh_cidrs: [203.0.113.7/32]",
        )


def spec_rules(spec: ClusterSpec) -> None:
    """What ClusterSpec itself checks on GCP (ssh_cidrs may still be learned later)."""
    zone, region = zone_and_region(spec)
    if not zone.startswith(f"{region}-"):
        offered = zones_for(spec.instance_type or "", region)
        pick = f"a zone such as {offered[0]}" if offered else f"a zone of {region}"
        raise SpecError("zone", f"{zone} is not in region {region}", f"pick {pick}")
    if spec.ttl_minutes > MAX_RUN_MINUTES:
        raise SpecError(
            "ttl_minutes",
            f"{spec.ttl_minutes} is over GCE's longest run-time limit of 120 days",
            f"use at most {MAX_RUN_MINUTES} minutes",
        )
    labels(spec.tags)
    it = spec.instance_type or ""
    if it.startswith(COMPACT_SERIES) and spec.nodes > COMPACT_MAX_VMS:
        raise SpecError(
            "nodes",
            f"{spec.nodes} {it} nodes do not fit one compact placement policy "
            f"(at most {COMPACT_MAX_VMS} VMs)",
            f"use at most {COMPACT_MAX_VMS} nodes per cluster",
        )
    if spec.vpc_id and not spec.subnet_id:
        # network.py would build a network of its own and leave vpc_id unused.
        raise SpecError(
            "subnet_id",
            "is missing: vpc_id alone names a network but not the subnet the nodes join",
            "pass subnet_id of a subnet of that network in the cluster's region "
            "(projects/P/regions/R/subnetworks/S), or leave out vpc_id to build a network",
        )
    if spec.subnet_id and not spec.vpc_id:
        # The firewall rules belong to a network: network.py would build its own and leave
        # subnet_id unused.
        raise SpecError(
            "vpc_id",
            "is missing: subnet_id alone does not name the network the firewall rules go on",
            "pass vpc_id of the subnet's network too, or leave out subnet_id to build a network",
        )
    if spec.fabric in A3_NEEDS and not spec.image:
        raise SpecError(
            "image",
            f"{it}'s GPU NICs need {A3_NEEDS[spec.fabric]}, and the stock Deep Learning VM "
            "image has neither, so every NCCL job would fail",
            "pass image: an image built with them (as Cluster Toolkit's A3 blueprints do), "
            "or use a2-ultragpu-8g / a2-highgpu-8g",
        )
