"""GCP account checks before anything is created: the image, the quotas, the NAT of a subnet."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpufleet.components.gcp.rules import (
    DLVM_IMAGE,
    gpu_quota_metric,
    image_family,
    image_name,
    zone_and_region,
)
from gpufleet.components.validators import Validator, refuse

if TYPE_CHECKING:
    from gpufleet.components.catalog import InstanceType
    from gpufleet.components.clusterspec import ClusterSpec


def _get(obj: Any, key: str) -> Any:
    """A field of an invoke's answer: typed result (live) or dict (a FakeAccount's answer)."""
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def check_image(spec: ClusterSpec, it: InstanceType) -> str | None:
    import pulumi_gcp as gcp

    image = spec.image or DLVM_IMAGE
    family, named = image_family(image), image_name(image)
    try:
        if family:
            found = gcp.compute.get_image(project=family[0], family=family[1])
        elif named:
            found = gcp.compute.get_image(project=named[0], name=named[1])
        else:
            return None  # another form (a self link GCE resolves): GCE itself says
        why = "" if _get(found, "name") else "no image"
    except Exception as e:
        found, why = None, str(e).splitlines()[0][:200]
    if why:
        raise refuse(
            IMAGE,
            f"{image} does not resolve ({why}); a family whose images are all deprecated "
            "resolves to none",
            "pick a supported family (Deep Learning VM 'Choose an image' page) or an image "
            "that exists: `gcloud compute images describe-from-family FAMILY --project P`",
        )
    status = _get(found, "status")
    if status and status != "READY":
        raise refuse(
            IMAGE, f"{image} resolves to {_get(found, 'name')}, {status}", "pick another image"
        )
    return f"{image} -> {_get(found, 'name')} ({status or 'status unknown'})"


IMAGE = Validator(
    "gcp",
    "the boot image resolves to a current image",
    "GCE images.getFromFamily / images.get (gcp.compute.get_image)",
    check_image,
)


def _project() -> str:
    import pulumi_gcp as gcp

    return str(_get(gcp.organizations.get_client_config(), "project"))


def quota_limit(metric: str, region: str | None) -> float | None:
    """The project's limit of a Compute Engine quota metric (Cloud Quotas API), in `region`
    when it is regional; None when the API lists no such quota."""
    import pulumi_gcp as gcp

    infos = gcp.cloudquota.get_s_quota_infos(
        parent=f"projects/{_project()}", service="compute.googleapis.com"
    )
    want = metric.lower()
    for info in _get(infos, "quota_infos") or []:
        if str(_get(info, "metric") or "").rsplit("/", 1)[-1].lower() != want:
            continue
        regional = "region" in (_get(info, "dimensions") or [])
        if region is None and regional:
            continue
        best = None
        for dim in _get(info, "dimensions_infos") or []:
            where = (_get(dim, "dimensions") or {}).get("region")
            if regional and where not in (region, None):
                continue
            for d in _get(dim, "details") or []:
                value = float(_get(d, "value"))
                if where == region or best is None:
                    best = value
        if best is not None:
            return best
    return None


def needs(spec: ClusterSpec, it: InstanceType) -> list[tuple[str, str | None, int]]:
    """(metric, region or None for global, amount) the cluster draws on."""
    _, region = zone_and_region(spec)
    networks = 0 if (spec.vpc_id and spec.subnet_id) else 1 + it.extra_nics
    out: list[tuple[str, str | None, int]] = []
    if networks:
        out.append(("NETWORKS", None, networks))
    gpus = it.gpus * spec.nodes
    metric = gpu_quota_metric(it.gpu_model, spec.spot)
    if metric:
        out.append((metric, region, gpus))
    out.append(("GPUS_ALL_REGIONS", None, gpus))
    out.append(("PREEMPTIBLE_CPUS" if spec.spot else "CPUS", region, it.vcpus * spec.nodes))
    return out


def check_quotas(spec: ClusterSpec, it: InstanceType) -> str | None:
    seen = []
    for metric, region, amount in needs(spec, it):
        limit = quota_limit(metric, region)
        if limit is None:
            continue
        where = f"in {region}" if region else "globally"
        if limit < amount:
            raise refuse(
                QUOTAS,
                f"the project's {metric} quota is {math.floor(limit)} {where}; this cluster needs "
                f"{amount}",
                f"request an increase of {metric} {where} (console: IAM & Admin > Quotas)"
                + (
                    ", or pass vpc_id and subnet_id of an existing network"
                    if metric == "NETWORKS"
                    else ""
                ),
            )
        seen.append(f"{metric} {math.floor(limit)} >= {amount}")
    return "; ".join(seen) or "no quota listed"


QUOTAS = Validator(
    "gcp",
    "the project's quotas hold the cluster (networks, GPUs, vCPUs)",
    "Cloud Quotas quotaInfos.list (gcp.cloudquota.get_s_quota_infos)",
    check_quotas,
)


def check_nat(spec: ClusterSpec, it: InstanceType) -> str | None:
    if not (spec.vpc_id and spec.subnet_id) or spec.public_workers or spec.nodes < 2:
        return None
    import pulumi_gcp as gcp

    _, region = zone_and_region(spec)
    network = spec.vpc_id.rsplit("/", 1)[-1]
    subnet = spec.subnet_id.rsplit("/", 1)[-1]
    routers = _get(gcp.compute.get_routers(region=region), "routers") or []
    for router in routers:
        if str(_get(router, "network") or "").rsplit("/", 1)[-1] != network:
            continue
        for nat in _get(router, "nats") or []:
            scope = str(_get(nat, "source_subnetwork_ip_ranges_to_nat") or "")
            found = f"Cloud NAT {_get(nat, 'name')} on router {_get(router, 'name')} ({region})"
            if scope.startswith("ALL_SUBNETWORKS"):
                return found
            if scope == "LIST_OF_SUBNETWORKS":  # routers.list via the provider omits the list
                return found + f", for a list of subnets (that {subnet} is in it is not checked)"
    raise refuse(
        NAT,
        f"no Cloud NAT in {region} serves subnet {subnet} of network {network}, so the "
        "workers (no external IP) could not fetch packages",
        f"add a Cloud Router with NAT for the subnet in {region}, or set public_workers: true",
    )


NAT = Validator(
    "gcp",
    "an existing subnet gives the workers egress (Cloud NAT)",
    "GCE routers.list (gcp.compute.get_routers)",
    check_nat,
    applies="vpc_id and subnet_id given, private workers, more than one node",
)

VALIDATORS = [IMAGE, QUOTAS, NAT]
