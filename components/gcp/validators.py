"""GCP account checks before anything is created: the image, the quotas, the NAT of a subnet."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpufleet.components.gcp.byo import brought, network_project
from gpufleet.components.gcp.rules import (
    DLVM_IMAGE,
    gpu_quota_metric,
    image_family,
    image_name,
    zone_and_region,
)
from gpufleet.components.invokes import lookup_opts
from gpufleet.components.validators import Unanswered, Validator, refuse

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
            found = gcp.compute.get_image(project=family[0], family=family[1], opts=lookup_opts())
        elif named:
            found = gcp.compute.get_image(project=named[0], name=named[1], opts=lookup_opts())
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

    return str(_get(gcp.organizations.get_client_config(opts=lookup_opts()), "project"))


# The Cloud Quotas API is off by default on a project, and a caller may lack cloudquotas.quotas.get.
_UNASKABLE = ("has not been used", "is disabled", "SERVICE_DISABLED", "PERMISSION_DENIED", "403")
QUOTAS_API_FIX = (
    "enable the Cloud Quotas API (`gcloud services enable cloudquotas.googleapis.com`) and grant "
    "the caller roles/cloudquotas.viewer, so quotas are checked before anything is created"
)


def quota_infos() -> list[Any]:
    """The project's Compute Engine quotaInfos (Cloud Quotas API); Unanswered when the API is
    disabled or the caller may not read it."""
    import pulumi_gcp as gcp

    try:
        infos = gcp.cloudquota.get_s_quota_infos(
            parent=f"projects/{_project()}", service="compute.googleapis.com", opts=lookup_opts()
        )
    except Exception as e:
        text = str(e)
        if any(k in text for k in _UNASKABLE):
            raise Unanswered(
                f"Cloud Quotas API: {text.splitlines()[0][:160]}; fix: {QUOTAS_API_FIX}"
            ) from e
        raise
    return list(_get(infos, "quota_infos") or [])


def _value(detail: Any) -> float:
    value = float(_get(detail, "value"))
    return math.inf if value < 0 else value  # a negative limit is unlimited (Cloud Quotas API)


def quota_limit(infos: list[Any], metric: str, region: str | None, **dims: str) -> float | None:
    """The limit of a quota, by metric name (NETWORKS) or quota id
    (GPUS-PER-GPU-FAMILY-per-project-region), in `region` and for `dims` (gpu_family=...):
    the most specific dimensions info that applies wins; None when none is listed."""
    want = metric.lower()
    for info in infos:
        name = str(_get(info, "metric") or "").rsplit("/", 1)[-1].lower()
        if want not in (name, str(_get(info, "quota_id") or "").lower()):
            continue
        keys = list(_get(info, "dimensions") or [])
        asked = {**({"region": region} if region else {}), **dims}
        if any(k not in asked for k in keys):
            continue  # a per-zone quota, or a dimension this check cannot name
        best: tuple[int, float] | None = None
        for d in _get(info, "dimensions_infos") or []:
            given = dict(_get(d, "dimensions") or {})
            if any(asked.get(k) != v for k, v in given.items()):
                continue
            where = list(_get(d, "applicable_locations") or [])
            scoped = region and "region" in keys and "region" not in given and where
            if scoped and region not in where and "global" not in where:
                continue
            for detail in _get(d, "details") or []:
                if best is None or len(given) > best[0]:
                    best = (len(given), _value(detail))
        if best is not None:
            return best[1]
    return None


def gpu_family(metric: str) -> str:
    """The gpu_family dimension of a GPU metric: NVIDIA_H100_MEGA_GPUS -> NVIDIA_H100_MEGA."""
    return metric.removeprefix("PREEMPTIBLE_").removesuffix("_GPUS")


def needs(spec: ClusterSpec, it: InstanceType) -> list[tuple[str, str | None, int]]:
    """(metric, region or None for global, amount) the cluster draws on, standard model."""
    _, region = zone_and_region(spec)
    # Networks the user brings (plain ids or Outputs) are not created (network.py).
    user = brought()
    existing = bool(spec.vpc_id and spec.subnet_id) or user.primary
    networks = (0 if user.gpu else it.extra_nics) + (0 if existing else 1)
    out: list[tuple[str, str | None, int]] = []
    if networks:
        out.append(("NETWORKS", None, networks))
    gpus = it.gpus * spec.nodes
    metric = gpu_quota_metric(it.gpu_model, False, it.machine_type or it.name)
    if metric:
        out.append((metric, region, gpus))
    out.append(("GPUS_ALL_REGIONS", None, gpus))
    out.append(("CPUS", region, it.vcpus * spec.nodes))
    return out


def _limit(
    infos: list[Any], metric: str, region: str | None, spot: bool
) -> tuple[str, float | None, str]:
    """(metric checked, its limit, a note) for one need; Spot VMs draw on the preemptible quota
    when the project has one above 0, else on the standard quota (Create and use Spot VMs)."""
    if spot and metric not in ("NETWORKS", "GPUS_ALL_REGIONS"):
        preemptible = f"PREEMPTIBLE_{metric}"
        limit = quota_limit(infos, preemptible, region)
        if limit:
            return preemptible, limit, ""
        note = f" ({preemptible} {'not listed' if limit is None else '0'}: Spot uses {metric})"
        return metric, quota_limit(infos, metric, region), note
    return metric, quota_limit(infos, metric, region), ""


def check_quotas(spec: ClusterSpec, it: InstanceType) -> str | None:
    infos = quota_infos()
    seen = []
    for base, region, amount in needs(spec, it):
        metric, limit, note = _limit(infos, base, region, spec.spot)
        where = f"in {region}" if region else "globally"
        if limit is None:
            seen.append(f"{metric} not listed: not checked{note}")
            continue
        _refuse_short(metric, limit, amount, where, note, it)
        seen.append(f"{metric} {_show(limit)} >= {amount}{note}")
        if metric.endswith("_GPUS") and metric != "GPUS_ALL_REGIONS" and not spec.spot:
            family = gpu_family(metric)
            per_family = quota_limit(
                infos, "GPUS-PER-GPU-FAMILY-per-project-region", region, gpu_family=family
            )
            if per_family is not None:
                _refuse_short(f"GPUS-PER-GPU-FAMILY ({family})", per_family, amount, where, "", it)
                seen.append(f"GPUS-PER-GPU-FAMILY {family} {_show(per_family)} >= {amount}")
    return "; ".join(seen)


def _show(limit: float) -> str:
    return "unlimited" if math.isinf(limit) else str(math.floor(limit))


def _refuse_short(
    metric: str, limit: float, amount: int, where: str, note: str, it: InstanceType
) -> None:
    if limit >= amount:
        return
    fix = f"request an increase of {metric} {where} (console: IAM & Admin > Quotas)"
    if metric == "NETWORKS":
        gpu_nets = (
            f"; gpu_vpc_ids and gpu_subnet_ids save its {it.extra_nics} GPU networks"
            if it.extra_nics
            else ""
        )
        fix += f", or pass vpc_id and subnet_id of an existing network (saves 1{gpu_nets})"
    raise refuse(
        QUOTAS,
        f"the project's {metric} quota is {math.floor(limit)} {where}{note}; this cluster needs "
        f"{amount}",
        fix,
    )


QUOTAS = Validator(
    "gcp",
    "the project's quotas hold the cluster (networks, GPUs, vCPUs)",
    "Cloud Quotas quotaInfos.list (gcp.cloudquota.get_s_quota_infos)",
    check_quotas,
)


def _nat_serves(nat: Any, subnet: str) -> str | None:
    """Why this NAT gives the subnet egress, or None."""
    if str(_get(nat, "type") or "PUBLIC") == "PRIVATE":
        return None  # Private NAT: to other VPCs, not the internet
    scope = str(_get(nat, "source_subnetwork_ip_ranges_to_nat") or "")
    if scope.startswith("ALL_SUBNETWORKS"):
        return scope
    if scope == "LIST_OF_SUBNETWORKS":
        listed = [
            str(_get(s, "name") or "").rsplit("/", 1)[-1] for s in _get(nat, "subnetworks") or []
        ]
        return f"{subnet} in its LIST_OF_SUBNETWORKS" if subnet in listed else None
    return None


def check_nat(spec: ClusterSpec, it: InstanceType) -> str | None:
    user = brought()
    if not (spec.vpc_id and spec.subnet_id or user.primary):
        return None
    if spec.public_workers or spec.nodes < 2:
        return None
    if not (spec.vpc_id and spec.subnet_id):
        raise Unanswered(
            "vpc_id/subnet_id are pulumi Outputs (resources of this program, unknown until "
            "they exist), so the subnet's Cloud NAT is not checked; without one the workers "
            "cannot fetch packages: give the subnet a Cloud NAT, or set public_workers: true"
        )
    import pulumi_gcp as gcp

    _, region = zone_and_region(spec)
    network = spec.vpc_id.rsplit("/", 1)[-1]
    subnet = spec.subnet_id.rsplit("/", 1)[-1]
    # A Shared VPC's routers live in its host project, not the cluster's.
    host = network_project(spec.vpc_id) or _project()
    routers = (
        _get(gcp.compute.get_routers(project=host, region=region, opts=lookup_opts()), "routers")
        or []
    )
    for router in routers:
        if str(_get(router, "network") or "").rsplit("/", 1)[-1] != network:
            continue
        for listed in _get(router, "nats") or []:
            # routers.list via the provider omits a NAT's subnet list and type: read each NAT.
            nat = gcp.compute.get_router_nat(
                name=_get(listed, "name"),
                router=_get(router, "name"),
                region=region,
                project=host,
                opts=lookup_opts(),
            )
            why = _nat_serves(nat, subnet)
            if why:
                where = f"router {_get(router, 'name')} ({host}, {region})"
                return f"Cloud NAT {_get(nat, 'name')} on {where}: {why}"
    raise refuse(
        NAT,
        f"no public Cloud NAT in {region} serves subnet {subnet} of network {network} (project "
        f"{host}), so the workers (no external IP) could not fetch packages",
        f"add a Cloud Router with NAT for the subnet in {region} (all subnets, or {subnet} in "
        "its list), or set public_workers: true",
    )


NAT = Validator(
    "gcp",
    "an existing subnet gives the workers egress (Cloud NAT)",
    "GCE routers.list and routers.getNatConfig (gcp.compute.get_routers, get_router_nat)",
    check_nat,
    applies="vpc_id and subnet_id given (skipped when Outputs), private workers, more than one "
    "node",
)


def check_role(spec: ClusterSpec, it: InstanceType) -> str | None:
    from gpufleet.components.gcp.identity import role_state
    from gpufleet.components.gcp.rules import SELF_DELETE_PERMISSIONS, SELF_DELETE_ROLE_ID

    project = _project()
    role = f"projects/{project}/roles/{SELF_DELETE_ROLE_ID}"
    try:
        state, found = role_state(project)
    except Exception as e:
        # Not Unanswered: whether to create or adopt the role depends on this answer.
        raise refuse(
            ROLE,
            f"cannot read {role} ({str(e).splitlines()[0][:160]}), so gpufleet cannot tell "
            "whether to create it or adopt it",
            "grant the caller iam.roles.get on the project (roles/iam.roleViewer)",
        ) from e
    if state == "absent":
        return f"{role} absent: this cluster creates it"
    if state == "deleted":
        return f"{role} deleted (within 7 days): this cluster undeletes it"
    have = set(_get(found, "permissions") or [])
    missing = [p for p in SELF_DELETE_PERMISSIONS if p not in have]
    if missing:
        raise refuse(
            ROLE,
            f"{role} exists without {', '.join(missing)}, so nodes could not delete themselves "
            "at expiry (gpufleet adopts the role as it is)",
            f"gcloud iam roles update {SELF_DELETE_ROLE_ID} --project {project} "
            f"--add-permissions {','.join(missing)}",
        )
    return f"{role} live, holds {', '.join(SELF_DELETE_PERMISSIONS)}: adopted"


ROLE = Validator(
    "gcp",
    "the shared self-delete role can be adopted (readable; holds compute.instances.delete)",
    "IAM projects.roles.get (gcp.projects.get_iam_custom_role)",
    check_role,
)

# Who may create VPC firewall rules in a Shared VPC host project: its Network and Security
# Admins (https://cloud.google.com/vpc/docs/shared-vpc, "Network and Security Admins"); a
# service project's Service Project Admin with compute.networkUser cannot.
FIREWALL_ROLE = "roles/compute.securityAdmin"


def check_network_project(spec: ClusterSpec, it: InstanceType) -> str | None:
    user = brought()
    if not (spec.vpc_id and spec.subnet_id or user.primary):
        return None
    rules = user.firewall_rules
    if not (spec.vpc_id and spec.subnet_id):
        raise Unanswered(
            "vpc_id/subnet_id are pulumi Outputs, so the network's project is read only when "
            "they resolve: "
            + (
                "gpufleet's two firewall rules go to the project their ids name; if it is not "
                "the provider's, the deployer needs compute.firewalls.create there "
                f"({FIREWALL_ROLE}), or pass firewall_rules: false"
                if rules
                else "firewall_rules is false, so gpufleet adds no rule"
            )
        )
    provider = _project()
    net, sub = network_project(spec.vpc_id), network_project(spec.subnet_id)
    if not net and sub and sub != provider:
        name = spec.vpc_id.rstrip("/").rsplit("/", 1)[-1]
        raise refuse(
            NETWORK_PROJECT,
            f"vpc_id {spec.vpc_id!r} names no project, so it means network {name} of the "
            f"provider's project {provider}, but subnet_id is in project {sub} (a Shared VPC's "
            "host): the nodes' NIC would name a network and a subnet of two projects, and the "
            "firewall rules another network than the subnet's",
            f"give vpc_id as projects/{sub}/global/networks/{name}",
        )
    host = net or sub or provider
    if not rules:
        return f"network of {host}; firewall_rules false: gpufleet adds no rule to it"
    if host == provider:
        return f"network of {provider}, the provider's project: the rules go there"
    raise Unanswered(
        f"the network's project {host} is not the provider's ({provider}): a Shared VPC, whose "
        f"firewall rules gpufleet creates in {host}. Whether the deployer holds "
        f"compute.firewalls.create there cannot be asked before anything is registered "
        "(pulumi-gcp has no invoke for projects.testIamPermissions), so without it the rules "
        f"fail after the rest is created; fix: grant the deployer {FIREWALL_ROLE} on {host}, or "
        "pass firewall_rules: false and have the network's owner create the two rules "
        "(docs/clouds.md, GCP: your own network)"
    )


NETWORK_PROJECT = Validator(
    "gcp",
    "a brought network and subnet are one project's, where gpufleet's firewall rules go",
    "the ids of vpc_id/subnet_id + getClientConfig (the provider's project)",
    check_network_project,
    applies="vpc_id and subnet_id given (skipped when Outputs, or when the network's project is "
    "not the provider's: compute.firewalls.create there cannot be asked)",
)

VALIDATORS = [IMAGE, QUOTAS, NETWORK_PROJECT, NAT, ROLE]
