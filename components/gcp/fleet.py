"""`gpufleet:gcp:GpuFleet`: GPU VMs with TERMINATE maintenance, gVNIC and one compact policy."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from components.catalog import lookup
from components.errors import SpecError
from components.fleet import GpufleetComponent
from components.gcp.network import build_networks, ssh_tag, worker_nat

# Deep Learning VM image family (facts §2.6; the family name seen in two independent public IaC
# files, still to verify at deploy time). The boot disk names the family itself, not the image
# it resolves to today: GCE picks the family's newest image at creation, and the provider does
# not see a later image in the same family as a change, so a re-run of `pulumi up` after a
# DLVM release keeps the VMs (a resolved self link would replace every VM).
DLVM_IMAGE = (
    "projects/deeplearning-platform-release/global/images/family/"
    "common-cu128-ubuntu-2204-nvidia-570"
)
COMPACT_SERIES = ("a2-", "a3-")
# GCE's limit on a VM's run time (max_run_duration): 120 days (limit-vm-runtime docs).
MAX_RUN_MINUTES = 120 * 24 * 60


def zone_and_region(spec: Any) -> tuple[str, str]:
    """The VMs' zone and the subnets' region: the region follows the zone when only it is given."""
    zone = spec.zone or f"{spec.effective_region}-a"
    return zone, spec.region or zone.rsplit("-", 1)[0]


def check_spec(spec: Any) -> None:
    """GCP-specific refusals, before anything is declared."""
    if not spec.ssh_cidrs:
        # An ingress firewall without source ranges or tags admits 0.0.0.0/0
        # (hashicorp/terraform-provider-google#6789), so an empty list would open SSH to all.
        raise SpecError(
            "ssh_cidrs",
            "is empty; on GCP a firewall rule without sources admits every address",
            "list the addresses allowed to SSH, e.g. ssh_cidrs: [203.0.113.7/32]",
        )
    zone, region = zone_and_region(spec)
    if not zone.startswith(f"{region}-"):
        raise SpecError(
            "zone", f"{zone} is not in region {region}", f"pick a zone such as {region}-a"
        )
    if spec.ttl_minutes > MAX_RUN_MINUTES:
        raise SpecError(
            "ttl_minutes",
            f"{spec.ttl_minutes} is over GCE's longest run-time limit of 120 days",
            f"use at most {MAX_RUN_MINUTES} minutes",
        )


def scheduling(spec: Any) -> Any:
    """GPU VMs cannot live-migrate; spot when asked; the TTL as a run-time limit that deletes.

    A run-time limit works on STANDARD VMs as well as SPOT (GCE's limit-vm-runtime page; it even
    lets GPU VMs deleted within 7 days draw on preemptible quota). A termination action with no
    limit is refused on STANDARD, hence DELETE only alongside max_run_duration or spot.
    """
    args: dict[str, Any] = {"on_host_maintenance": "TERMINATE", "automatic_restart": False}
    if spec.spot:
        args.update(provisioning_model="SPOT", preemptible=True)
    else:
        args.update(provisioning_model="STANDARD")
    if spec.ttl_minutes:
        args.update(
            instance_termination_action="DELETE",
            max_run_duration=gcp.compute.InstanceSchedulingMaxRunDurationArgs(
                seconds=spec.ttl_minutes * 60
            ),
        )
    elif spec.spot:
        args.update(instance_termination_action="DELETE")
    return gcp.compute.InstanceSchedulingArgs(**args)


def labels(tags: dict[str, str]) -> dict[str, str]:
    """GCP labels: lowercase keys and values of letters, digits, '-' and '_'."""
    import re

    def clean(s: str) -> str:
        return re.sub(r"[^a-z0-9_-]", "_", s.lower())[:63]

    return {clean(k): clean(v) for k, v in tags.items()}


class GpuFleet(GpufleetComponent):
    cloud = "gcp"

    def __init__(self, name: str, spec: Any, opts: pulumi.ResourceOptions | None = None, **kw):
        check_spec(spec)
        super().__init__(name, spec, opts, **kw)
        it = lookup("gcp", spec.instance_type)
        child = self.child()
        zone, region = zone_and_region(spec)
        node_labels = labels(self.tags)
        nets = build_networks(name, spec, it.extra_nics, child, region)
        if not spec.public_workers and spec.nodes > 1 and not spec.vpc_id:
            worker_nat(name, nets.network, region, child)

        policy = None
        if spec.nodes > 1 and it.name.startswith(COMPACT_SERIES):
            # No vm_count: with it, no VM finishes creating until all are requested (facts §0.8).
            policy = gcp.compute.ResourcePolicy(
                f"{name}-compact",
                region=region,
                group_placement_policy=gcp.compute.ResourcePolicyGroupPlacementPolicyArgs(
                    collocation="COLLOCATED", availability_domain_count=1
                ),
                opts=child,
            )
        image = spec.image or DLVM_IMAGE
        accelerators = None
        if it.accelerator:  # N1: GPUs are attached; A2/A3/G2 come with theirs (facts §2.1)
            accelerators = [
                gcp.compute.InstanceGuestAcceleratorArgs(type=it.accelerator, count=it.gpus)
            ]
        ssh_key = self.keys.user.public_key_openssh.apply(lambda k: f"{self.ssh_user}:{k.strip()}")

        vms = []
        for i in range(spec.nodes):
            public = i == 0 or spec.public_workers
            nics = [
                gcp.compute.InstanceNetworkInterfaceArgs(
                    network=nets.network,
                    subnetwork=nets.subnetwork,
                    nic_type="GVNIC",
                    # An access config is the external IP: the head's only, by default.
                    access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs()]
                    if public
                    else None,
                )
            ]
            nics += [
                gcp.compute.InstanceNetworkInterfaceArgs(
                    network=gnet, subnetwork=gsub, nic_type="GVNIC"
                )
                for gnet, gsub in nets.gpu
            ]
            vm = gcp.compute.Instance(
                f"{name}-node-{i}",
                machine_type=it.machine_type or it.name,
                zone=zone,
                boot_disk=gcp.compute.InstanceBootDiskArgs(
                    initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                        image=image, size=spec.disk_gb, type="pd-ssd", labels=node_labels
                    )
                ),
                network_interfaces=nics,
                guest_accelerators=accelerators,
                scheduling=scheduling(spec),
                resource_policies=policy.self_link if policy else None,
                metadata={"user-data": self.user_data(i), "ssh-keys": ssh_key},
                labels=node_labels,
                tags=[name, ssh_tag(name)] if public else [name],
                allow_stopping_for_update=True,
                opts=child,
            )
            vms.append(vm)
        self.finish(
            [
                {
                    "private_ip": vm.network_interfaces[0].network_ip,
                    "public_ip": vm.network_interfaces[0].access_configs.apply(
                        lambda acs: acs[0].nat_ip if acs else None
                    ),
                    "id": vm.instance_id,
                }
                for vm in vms
            ]
        )
