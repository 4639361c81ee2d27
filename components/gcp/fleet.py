"""`gpufleet:index:GcpGpuFleet`: GPU VMs, TERMINATE on maintenance, gVNIC, one compact policy."""

from typing import Any

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.catalog import lookup
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.fleet import GpufleetComponent
from gpufleet.components.fleetargs import spec_from_args
from gpufleet.components.gcp.args import GcpGpuFleetArgs
from gpufleet.components.gcp.byo import bringing, check_gpu_networks, split_args
from gpufleet.components.gcp.identity import SharedIdentity
from gpufleet.components.gcp.network import build_networks, worker_nat
from gpufleet.components.gcp.providerregion import provider_region, with_provider_region
from gpufleet.components.gcp.pullaccess import grant_reader, refuse_foreign_ecr
from gpufleet.components.gcp.rules import (
    COMPACT_SERIES,
    DLVM_IMAGE,
    check_spec,
    labels,
    termination_time,
    zone_and_region,
)
from gpufleet.components.invokes import asking, invoke_options
from gpufleet.components.registry import offer_check
from gpufleet.components.validators import offline, run_validators

# The boot disk's labels: fixed for the cluster's life (a change would replace every node).
DISK_LABELS = ("gpufleet-cluster", "managed-by")


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


class GcpGpuFleet(GpufleetComponent):
    """A GPU fleet on GCP: nodes, network, expiry backstop, and the outputs to reach them."""

    _cloud = "gcp"

    def __init__(
        self, name: str, args: GcpGpuFleetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # Every lookup asks the provider the resources will use (opts), not the default one.
        asked = invoke_options(opts, "gcp")
        with asking(asked):
            self._declare(name, args, opts, asked)

    def _declare(
        self,
        name: str,
        args: GcpGpuFleetArgs,
        opts: pulumi.ResourceOptions | None,
        asked: pulumi.InvokeOptions | None,
    ) -> None:
        # The networks the user brings may be Outputs: they stay out of the spec.
        plain, brought = split_args(args)
        if asked is not None and isinstance(plain, dict):
            provider = asked.provider
            assert provider is not None
            plain = with_provider_region(plain, provider_region(), provider.pulumi_resource_name)
        spec = spec_from_args(self._cloud, name, plain)
        check_spec(spec)
        refuse_foreign_ecr(spec)
        it = lookup("gcp", spec.instance_type or "")
        check_gpu_networks(brought, it.extra_nics, it.name)
        # Before anything is registered: a zone without the machine type fails here.
        self.availability = offer_check(self._cloud)(spec, it.name).availability
        # The account (quota, image, roles): each fact refuses with its fix, or is skipped offline.
        with bringing(brought):
            self.checks = run_validators(spec, it)
        super().__init__(name, spec, opts)
        child = self.child()
        zone, region = zone_and_region(spec)
        node_labels = labels(self.tags)
        nets = build_networks(name, spec, it.extra_nics, child, region, brought)
        # A network the stack builds gets its NAT; an existing subnet's NAT was checked by the
        # validators (components/gcp/validators.py).
        if not spec.public_workers and spec.nodes > 1 and nets.built:
            worker_nat(name, nets.network, region, child)

        policy = None
        # A VM consuming a reservation takes the reservation's placement policy; dstack sets none
        # of its own then ("Cannot use our own placement policies when provisioning in a
        # reservation", dstack src/dstack/_internal/core/backends/gcp/compute.py).
        if spec.nodes > 1 and it.name.startswith(COMPACT_SERIES) and not spec.reservation:
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
        ssh_key = self.keys.user.public_key_openssh.apply(
            lambda k: f"{self.login_user}:{k.strip()}"
        )
        self_delete = SharedIdentity(name, child)
        # The container image's repository in this project: readable by the nodes before any
        # boots (the VMs wait for the grant; the boot pull uses it).
        reader = grant_reader(name, spec, self_delete.member, not offline(), child)
        # Labels that change stay on the instance (labels update in place: setLabels) and off
        # the boot disk, whose labels force a new VM in providers before
        # terraform-provider-google v7.3.0: the expiry changes with every TTL change, and the
        # user's tags with an edit. The disk keeps only what is fixed for the cluster's life.
        disk_labels = {k: node_labels[k] for k in DISK_LABELS}
        # A TTL change moves scheduling.terminationTime, which is ForceNew
        # (terraform-provider-google resource_compute_instance.go): the VM is replaced. Delete
        # first, so a replacement never needs twice the GPU quota or capacity.
        vm_opts = pulumi.ResourceOptions.merge(
            child,
            pulumi.ResourceOptions(
                delete_before_replace=True, depends_on=[reader] if reader is not None else None
            ),
        )

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
                        image=image, size=spec.disk_gb, type="pd-ssd", labels=disk_labels
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
                    # Else the guest agent installs every project-wide key, with sudo.
                    "block-project-ssh-keys": "TRUE",
                    # the guest agent publishes the VM's own host keys (hostkeys/), no secret
                    "enable-guest-attributes": "TRUE",
                    # The recipe owns the driver (images/steps/10-driver.sh keeps a loaded one
                    # on the pinned branch, else installs the pinned version and reboots once);
                    # the Deep Learning VM's own first-boot installer, which this key turns on,
                    # would race it and reboot under it.
                    "install-nvidia-driver": "False",
                },
                # The recipe's driver is built by DKMS and unsigned: Secure Boot would refuse to
                # load it (images/steps/10-driver.sh). An org policy compute.requireShieldedVm
                # makes this VM fail to create; docs/clouds.md says so.
                shielded_instance_config=gcp.compute.InstanceShieldedInstanceConfigArgs(
                    enable_secure_boot=False
                ),
                labels=node_labels,
                tags=nets.tags.of(public),
                # Never stop a GPU node to update it: a change that needs a stop fails instead.
                allow_stopping_for_update=False,
                reservation_affinity=reservation_affinity(spec.reservation),
                service_account=self_delete.attach(),
                opts=vm_opts,
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
