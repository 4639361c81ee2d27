"""`gpufleet:gcp:GpuFleet`: GPU VMs with TERMINATE maintenance, gVNIC and one compact policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.catalog import lookup
from gpufleet.components.fleet import GpufleetComponent
from gpufleet.components.gcp.network import build_networks, ssh_tag, worker_nat
from gpufleet.components.gcp.rules import (
    COMPACT_SERIES,
    SELF_DELETE_PERMISSIONS,
    check_spec,
    labels,
    node_account_id,
    self_delete_role_id,
    termination_time,
    zone_and_region,
)
from gpufleet.components.registry import offer_check
from gpufleet.components.validators import run_validators

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

# Deep Learning VM image family (facts §2.6; the family name seen in two independent public IaC
# files, still to verify at deploy time). The boot disk names the family itself, not the image
# it resolves to today: GCE picks the family's newest image at creation, and the provider does
# not see a later image in the same family as a change, so a re-run of `pulumi up` after a
# DLVM release keeps the VMs (a resolved self link would replace every VM).
DLVM_IMAGE = (
    "projects/deeplearning-platform-release/global/images/family/"
    "common-cu128-ubuntu-2204-nvidia-570"
)


def scheduling(spec: ClusterSpec, expires_at: pulumi.Input[float]) -> Any:
    """GPU VMs cannot live-migrate; spot when asked; the TTL as an absolute time that DELETEs.

    Not max_run_duration: it counts from RUNNING and GCE clears the termination timestamp when
    the VM stops, so a guest poweroff before it left a stopped VM and its disks billed
    (limit-vm-runtime docs). terminationTime is absolute and the guest never powers off on GCP.
    """
    # A standard VM restarts after a host event: left TERMINATED, GCE would clear its
    # termination timestamp and never delete it. Spot VMs must not restart (provider rule).
    args: dict[str, Any] = {"on_host_maintenance": "TERMINATE", "automatic_restart": not spec.spot}
    if spec.spot:
        args.update(provisioning_model="SPOT", preemptible=True)
    else:
        args.update(provisioning_model="STANDARD")
    # expires_at is an Output when the stack's state holds it (components/expiry.py).
    when = pulumi.Output.from_input(expires_at).apply(termination_time)
    args.update(instance_termination_action="DELETE", termination_time=when)
    return gcp.compute.InstanceSchedulingArgs(**args)


# The node's token must be able to call the Compute API at all: a VM's access scopes cap what
# its service account may do, and IAM (the role below) is what actually limits it
# (compute/docs/access/service-accounts#scopes_best_practice).
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class SelfDelete:
    """What lets a node delete its own VM at its lease or expiry (images/ttl/gpufleet-expire).

    One service account per cluster, attached to every node; a custom role holding only
    compute.instances.delete; and that role granted on each of the cluster's instances (an
    instance-level binding, compute/docs/access/managing-access-to-resources), never on the
    project: the account can delete this cluster's VMs and touch nothing else. Both ids carry
    a digest of the cluster's fixed expiry, so a cluster re-created under the same name gets new
    ones: a deleted custom role's id stays taken for 37 days (iam projects.roles.delete).
    """

    def __init__(self, name: str, cluster: str, expires_at: Any, child: Any):
        self.account = gcp.serviceaccount.Account(
            f"{name}-nodes",
            account_id=expires_at.apply(lambda e: node_account_id(cluster, e)),
            display_name=f"gpufleet {cluster} nodes"[:100],
            description=f"gpufleet cluster {cluster}: its nodes delete themselves at expiry",
            opts=child,
        )
        self.role = gcp.projects.IAMCustomRole(
            f"{name}-self-delete",
            role_id=expires_at.apply(lambda e: self_delete_role_id(cluster, e)),
            title=f"gpufleet {cluster}: delete own VMs"[:100],
            description="Lets a gpufleet node delete its own VM at its lease or expiry",
            permissions=list(SELF_DELETE_PERMISSIONS),
            opts=child,
        )
        self.member = self.account.email.apply(lambda e: f"serviceAccount:{e}")

    def attach(self) -> Any:
        """The instance's service account: this cluster's, with a token the Compute API takes."""
        return gcp.compute.InstanceServiceAccountArgs(
            email=self.account.email, scopes=[CLOUD_PLATFORM_SCOPE]
        )

    def grant(self, label: str, vm: Any, child: Any) -> Any:
        """The role on this one instance, for the cluster's account."""
        return gcp.compute.InstanceIAMMember(
            label,
            instance_name=vm.name,
            zone=vm.zone,
            project=vm.project,
            role=self.role.name,
            member=self.member,
            opts=child,
        )


def reservation_affinity(name: str | None) -> Any:
    """Consume this specific reservation (compute/docs/instances/reservations-consume)."""
    if not name:
        return None
    return gcp.compute.InstanceReservationAffinityArgs(
        type="SPECIFIC_RESERVATION",
        specific_reservation=gcp.compute.InstanceReservationAffinitySpecificReservationArgs(
            key="compute.googleapis.com/reservation-name", values=[name]
        ),
    )


class GpuFleet(GpufleetComponent):
    cloud = "gcp"

    def __init__(
        self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None, **kw
    ):
        check_spec(spec)
        it = lookup("gcp", spec.instance_type or "")
        # Before anything is registered: a zone without the machine type fails here.
        self.availability = offer_check(self.cloud)(spec, it.name).availability
        # The account (quota, image, roles): each fact refuses with its fix, or is skipped offline.
        self.checks = run_validators(spec, it)
        super().__init__(name, spec, opts, **kw)
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
        # Bundled local SSDs declared as GCE attaches them, or the provider would see them as a
        # change and replace the VM on the next apply (Cluster Toolkit sets local_ssd_count: 16
        # for A3); the recipe mounts them as one RAID0 (images/steps/45-local-ssd.sh).
        scratch = [gcp.compute.InstanceScratchDiskArgs(interface="NVME")] * it.local_ssds or None
        ssh_key = self.keys.user.public_key_openssh.apply(lambda k: f"{self.ssh_user}:{k.strip()}")
        self_delete = SelfDelete(name, spec.name, self.expires_at, child)

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
                scheduling=scheduling(spec, self.expires_at),
                scratch_disks=scratch,
                resource_policies=policy.self_link if policy else None,
                metadata={
                    "user-data": self.user_data(i),
                    "ssh-keys": ssh_key,
                    # the guest agent publishes the VM's own host keys (hostkeys/), no secret
                    "enable-guest-attributes": "TRUE",
                },
                labels=node_labels,
                tags=[name, ssh_tag(name)] if public else [name],
                allow_stopping_for_update=True,
                reservation_affinity=reservation_affinity(spec.reservation),
                service_account=self_delete.attach(),
                opts=child,
            )
            self_delete.grant(f"{name}-node-{i}-self-delete", vm, child)
            vms.append(vm)
        self.finish(
            [
                {
                    "private_ip": vm.network_interfaces[0].network_ip,
                    "public_ip": vm.network_interfaces[0].access_configs.apply(
                        lambda acs: acs[0].nat_ip if acs else None
                    ),
                    "id": vm.instance_id,
                    "host_key_at": vm.self_link,  # guest attributes hostkeys/ of this VM
                }
                for vm in vms
            ]
        )
