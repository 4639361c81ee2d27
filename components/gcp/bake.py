"""`gpufleet:gcp:ImageBake`: a builder VM runs the recipe; a GCE image is made from its disk."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi
import pulumi_gcp as gcp

from gpufleet.components.bake import ImageBakeComponent
from gpufleet.components.gcp.fleet import DLVM_IMAGE, scheduling
from gpufleet.components.gcp.network import build_networks
from gpufleet.components.gcp.rules import default_zone, labels

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

DEFAULT_BUILDER = "g2-standard-8"


class ImageBake(ImageBakeComponent):
    cloud = "gcp"
    default_builder = DEFAULT_BUILDER
    # The seal still powers the builder off: the image is made from a disk no running system
    # writes to any more. GCE clears a stopped VM's termination time (images/ttl/gpufleet-expire,
    # gce-delete), so from the seal on only `sweep` removes a builder whose CLI died.
    backstop = (
        "GCE deletes it at its terminationTime (instanceTerminationAction DELETE) while it runs;"
        " the seal powers it off and GCE clears a stopped VM's termination time, so a bake whose"
        " CLI dies after the seal leaves the stopped builder (its disk billed) for"
        " `gpufleet sweep`"
    )

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        super().__init__(name, spec, opts)
        child = self.child()
        region = spec.effective_region
        assert region is not None  # gcp has a default region
        zone = spec.zone or default_zone(spec.instance_type or DEFAULT_BUILDER, region)
        node_labels = labels(self.tags)
        nets = build_networks(name, spec, 0, child, region)
        ssh_key = self.keys.user.public_key_openssh.apply(lambda k: f"{self.ssh_user}:{k.strip()}")
        builder = gcp.compute.Instance(
            f"{name}-builder",
            machine_type=spec.instance_type or DEFAULT_BUILDER,
            zone=zone,
            boot_disk=gcp.compute.InstanceBootDiskArgs(
                initialize_params=gcp.compute.InstanceBootDiskInitializeParamsArgs(
                    image=spec.image or DLVM_IMAGE,
                    size=spec.disk_gb,
                    type="pd-ssd",
                    labels=node_labels,
                )
            ),
            network_interfaces=[
                gcp.compute.InstanceNetworkInterfaceArgs(
                    network=nets.network,
                    subnetwork=nets.subnetwork,
                    nic_type="GVNIC",
                    access_configs=[gcp.compute.InstanceNetworkInterfaceAccessConfigArgs()],
                )
            ],
            # As a node's: GCE deletes the builder at its expiry (terminationTime + DELETE),
            # whatever became of the CLI or the builder's own timer.
            scheduling=scheduling(spec.with_(spot=False), self.expires_at),
            metadata={"user-data": self.user_data(), "ssh-keys": ssh_key},
            labels=node_labels,
            # The SSH wait reaches it through the rule on the `-ssh` tag (network.py).
            tags=nets.tags.of(public=True),
            opts=child,
        )
        ready = self.wait_ready(builder.network_interfaces[0].access_configs[0].nat_ip, builder)
        # GCE refuses an image of a disk whose VM is not TERMINATED yet (the API's forceCreate is
        # not in the provider), and the sealed builder may still be stopping: a snapshot may be
        # taken of an attached disk, and the image is made from it.
        snapshot = gcp.compute.Snapshot(
            f"{name}-snapshot",
            source_disk=builder.boot_disk.source,
            zone=zone,
            labels=node_labels,
            opts=self.child(depends_on=[ready]),
        )
        image = gcp.compute.Image(
            f"{name}-image",
            source_snapshot=snapshot.self_link,
            family="gpufleet-node",
            guest_os_features=[gcp.compute.ImageGuestOsFeatureArgs(type="GVNIC")],
            labels=labels(self.image_tags),
            opts=self.child(depends_on=[ready], retain_on_delete=True),
        )
        self.finish(image.self_link)
