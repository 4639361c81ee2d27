"""`gpufleet:aws:ImageBake`: a builder instance runs the recipe; an AMI is made from it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi
import pulumi_aws as aws

from gpufleet.components.aws.fleet import ROOT_DEVICE, encode_user_data, resolved_image_id
from gpufleet.components.aws.network import build_network
from gpufleet.components.bake import ImageBakeComponent
from gpufleet.components.invokes import asking, invoke_options
from gpufleet.components.registry import offer_check

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

DEFAULT_BUILDER = "g5.xlarge"  # the recipe needs a GPU to verify the driver it installs


class ImageBake(ImageBakeComponent):
    cloud = "aws"
    default_builder = DEFAULT_BUILDER
    backstop = (
        "its expiry timer powers it off, and EC2 terminates it"
        " (instance-initiated shutdown: terminate)"
    )
    # The seal leaves the builder running: a poweroff from inside would terminate it (below),
    # and CreateImage stops it for the capture itself (no snapshot_without_reboot).
    seal_powers_off = False

    def __init__(self, name: str, spec: ClusterSpec, opts: pulumi.ResourceOptions | None = None):
        builder_type = spec.instance_type or self.default_builder
        # Before anything is registered: a region or zone without the builder type fails here.
        # Asked through the provider the bake's resources use (components/invokes.py).
        with asking(invoke_options(opts, "aws")):
            offered = offer_check(self.cloud)(spec, builder_type)
        zone, self.availability = offered.zone, offered.availability
        assert zone is not None  # EC2's check always picks the zone
        super().__init__(name, spec, opts)
        child = self.child()
        tags = self.tags
        net = build_network(name, spec, tags, child, zone)
        builder = aws.ec2.Instance(
            f"{name}-builder",
            # An AMI id: see resolved_image_id.
            ami=resolved_image_id(spec.image, pulumi.InvokeOptions(parent=self)),
            instance_type=builder_type,
            subnet_id=net.subnet_id,
            vpc_security_group_ids=[net.security_group.id, net.ssh_group.id],
            associate_public_ip_address=True,
            user_data_base64=self.user_data().apply(encode_user_data),  # gzip: EC2's 16 KB
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required"
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_size=spec.disk_gb, volume_type="gp3", encrypted=True
            ),
            # As a node's: its expiry timer's poweroff (or the seal's backstop) terminates it, so
            # a builder whose CLI died does not stay stopped with its volume. This applies only
            # to a shutdown from inside the OS, not to the stop and reboot CreateImage does.
            instance_initiated_shutdown_behavior="terminate",
            tags={**tags, "Name": f"{name}-builder"},
            volume_tags={**tags, "Name": f"{name}-builder"},
            opts=child,
        )
        ready = self.wait_ready(builder.public_ip, builder)
        # CreateImage takes a running instance: the builder is sealed, and without
        # snapshot_without_reboot EC2 shuts it down for the snapshots, then reboots it.
        ami = aws.ec2.AmiFromInstance(
            f"{name}-ami",
            source_instance_id=builder.id,
            description=f"gpufleet node image ({spec.cloud}, {ROOT_DEVICE} root, recipe images/)",
            tags={**self.image_tags, "Name": f"{name}-ami"},
            opts=self.child(depends_on=[ready], retain_on_delete=True),
        )
        self.finish(ami.id)
