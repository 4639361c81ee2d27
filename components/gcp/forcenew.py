"""GCP: which input changes replace a resource, per terraform-provider-google (bridged)."""

from __future__ import annotations

from gpufleet.components.replacements import ForceNew

# Sources (read 2026-11-25), hashicorp/terraform-provider-google,
# google/services/compute/resource_compute_instance.go: boot_disk (and its initialize_params:
# image, size, type, labels), scratch_disk, guest_accelerator, zone, name, project,
# description, metadata_startup_script, scheduling.preemptible and scheduling.termination_time:
# ForceNew. network_interface is ForceNew as a list (the number of interfaces); of an item,
# nic_type and queue_count are ForceNew and access_config is updated in place.
# labels, metadata and tags are set in place (instances.setLabels / setMetadata / setTags).
# machine_type, service_account, min_cpu_platform, shielded_instance_config, enable_display,
# advanced_machine_features, scheduling.node_affinities, scheduling.max_run_duration and
# network_interface.N.(network|subnetwork|subnetwork_project) change only by stopping the VM;
# the nodes set allow_stopping_for_update=false (components/gcp/fleet.py), so the update is
# refused: "Changing the machine_type, ... on a started instance requires stopping it. To
# acknowledge this, please set allow_stopping_for_update = true in your config."
# The boot disk's labels and termination_time as
# ForceNew are also in ../shared/reference/cloud-gpu-facts.md ("GCP ForceNew fields", second
# reviews of 2026-11-25). Network (name, auto_create_subnetworks, mtu), Subnetwork (network,
# region), Firewall (network), Router and RouterNat (network/router, region), ResourcePolicy
# (every field), IAMCustomRole (role_id), service Account (account_id) and the IAM member
# resources (every field): ForceNew in their resource files.
TABLE = ForceNew(
    force_new={
        "gcp:compute/instance:Instance": (
            "bootDisk",
            "networkInterfaces.#",
            "networkInterfaces.nicType",
            "networkInterfaces.queueCount",
            "scratchDisks",
            "guestAccelerators",
            "zone",
            "name",
            "project",
            "description",
            "metadataStartupScript",
            "scheduling.preemptible",
            "scheduling.terminationTime",
        ),
        "gcp:compute/network:Network": ("name", "autoCreateSubnetworks", "mtu"),
        "gcp:compute/subnetwork:Subnetwork": ("network", "region"),
        "gcp:compute/firewall:Firewall": ("network",),
        "gcp:compute/router:Router": ("network", "region"),
        "gcp:compute/routerNat:RouterNat": ("router", "region"),
        "gcp:compute/resourcePolicy:ResourcePolicy": ("groupPlacementPolicy", "region", "name"),
        "gcp:projects/iAMCustomRole:IAMCustomRole": ("roleId",),
        "gcp:serviceaccount/account:Account": ("accountId",),
        "gcp:compute/instanceIAMMember:InstanceIAMMember": (
            "instanceName",
            "member",
            "project",
            "role",
            "zone",
        ),
    },
    immutable={
        "gcp:compute/instance:Instance": (
            "machineType",
            "serviceAccount",
            "minCpuPlatform",
            "shieldedInstanceConfig",
            "enableDisplay",
            "advancedMachineFeatures",
            "scheduling.nodeAffinities",
            "scheduling.maxRunDuration",
            "networkInterfaces.network",
            "networkInterfaces.subnetwork",
            "networkInterfaces.subnetworkProject",
        ),
    },
    refusals={
        "gcp:compute/instance:Instance": (
            "the provider changes it only by stopping the VM, which the nodes do not allow "
            "(allow_stopping_for_update=false), so `pulumi up` fails: leave it as it is, or "
            "re-create the cluster (down, then up)"
        ),
    },
    nodes=("gcp:compute/instance:Instance",),
    notes={"metadata.user-data": "a running node keeps the recipe it booted with"},
    labels={
        "bootDisk.initializeParams.labels": "boot disk labels",
        "bootDisk.initializeParams.image": "boot disk image",
        "bootDisk": "boot disk",
        "scheduling.terminationTime": "scheduling.terminationTime (the expiry)",
        # cloud-init runs user data once per instance: a running VM keeps the recipe it booted
        # with (cloudinit.readthedocs.io, module frequency "once-per-instance").
        "metadata.user-data": "user data (metadata)",
        "metadata": "metadata",
        "labels": "labels",
    },
)
