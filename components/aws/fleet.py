"""`gpufleet:index:AwsGpuFleet`: EFA launch templates, instances in a cluster placement group."""

import base64
import gzip
from typing import Any

import pulumi
import pulumi_aws as aws

from gpufleet.components.aws.args import AwsGpuFleetArgs
from gpufleet.components.aws.backstop import backstop_role, terminate_at_expiry
from gpufleet.components.aws.network import (
    aws_region,
    bringing,
    build_network,
    default_provider_region,
    provider_region,
    take_user_network,
)
from gpufleet.components.aws.offers import subnet_zone, zone_fallback
from gpufleet.components.aws.pullaccess import node_profile
from gpufleet.components.catalog import lookup
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import GpufleetError, SpecError
from gpufleet.components.fleet import GpufleetComponent, node_user_data
from gpufleet.components.fleetargs import spec_from_args
from gpufleet.components.invokes import asking, explicit_provider, invoke_options
from gpufleet.components.registry import offer_check
from gpufleet.components.validators import run_validators

# Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04), latest (facts §1.6). The name
# follows AWS's rule (DLAMI name minus "deep", "learning", "ami") and is the one public IaC uses.
DLAMI_SSM_PARAMETER = (
    "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
)
# The tags a launch template's tag specifications carry: fixed for the cluster's life (its
# name), never the user's `tags` or the expiry, which change without replacing a node.
LAUNCH_TAGS = ("gpufleet-cluster", "managed-by")
ROOT_DEVICE = "/dev/sda1"  # the DLAMI's (bake.py's description); fleets read the AMI's own
USER_DATA_LIMIT = 16384  # bytes, before base64 (EC2 user guide, "Work with instance user data")


def image_id(image: str | None) -> str:
    """The launch template's image: an AMI id, or an SSM parameter EC2 resolves at launch.

    `resolve:ssm:` keeps the template unchanged when AWS publishes a new DLAMI, so a later
    `pulumi up` does not replace running nodes (a changed launch template forces new instances).
    """
    image = image or DLAMI_SSM_PARAMETER
    if image.startswith("/"):
        return f"resolve:ssm:{image}"
    if image.startswith(("ami-", "resolve:ssm:")):
        return image
    raise SpecError(
        "image",
        f"{image!r} is neither an AMI id nor an SSM parameter",
        "give ami-0123456789abcdef0, or a parameter path such as " + DLAMI_SSM_PARAMETER,
    )


def resolved_image_id(
    image: str | None, opts: pulumi.InvokeOptions | None = None
) -> pulumi.Output[str]:
    """An AMI id read now, for `aws.ec2.Instance` (which cannot take `resolve:ssm:`).

    The provider describes the image of an instance with a root_block_device and fails with
    InvalidAMIID.Malformed on a `resolve:ssm:` value, or plans a replacement on every run
    (terraform-provider-aws issues 43488 and 22912); a launch template resolves it at launch.
    """
    ref = image_id(image)
    if ref.startswith("resolve:ssm:"):
        return aws.ssm.get_parameter_output(name=ref[len("resolve:ssm:") :], opts=opts).value
    return pulumi.Output.from_input(ref)


def root_device(image: str | None, opts: pulumi.InvokeOptions | None = None) -> pulumi.Output[str]:
    """The AMI's own root device name (DescribeImages RootDeviceName): /dev/sda1 on Ubuntu,
    /dev/xvda on Amazon Linux. A block device mapping under another name adds a second, empty
    volume and leaves the root at the AMI's size (EC2 user guide, block device mappings)."""
    ami = resolved_image_id(image, opts)
    return aws.ec2.get_ami_output(
        filters=[aws.ec2.GetAmiFilterArgs(name="image-id", values=[ami])],
        include_deprecated=True,
        opts=opts,
    ).root_device_name


def encode_user_data(text: str) -> str:
    """Cloud-init text as EC2 takes it: gzip (cloud-init inflates it), then base64.

    The rendered recipe with real keys is just over EC2's 16 KB limit as plain text; gzip
    brings it to about a third.
    """
    packed = gzip.compress(text.encode(), compresslevel=9, mtime=0)
    if len(packed) > USER_DATA_LIMIT:
        raise GpufleetError(
            f"node user data is {len(packed)} bytes gzipped; EC2 takes at most {USER_DATA_LIMIT}",
            hint="move large files out of images/ cloud-init templates (fetch them at boot)",
        )
    return base64.b64encode(packed).decode()


def network_interfaces(
    efa_interfaces: int,
    subnet_id: Any,
    groups: list[Any],
    ssh_groups: list[Any],
    public: bool,
    primary_eni: Any = None,
) -> list[Any]:
    """One interface per network card: the primary (card 0, device 0) carries the node's one
    address, as EFA when the type has EFA; every other card gets an EFA-only interface.

    EFA-only interfaces have no IP address, so a p5 takes one subnet address instead of 32, and
    the instance gets no 32 same-subnet IP interfaces (EC2 user guide, efa-acc-inst-types.md:
    "use the next unused network card index, device index 0, for EFA-only network interface";
    ParallelCluster 3.15 launches its compute nodes with one IP interface, the rest EFA-only).
    Every interface carries `groups` (the fleet's own, or the program's, and its extra ones:
    EFA traffic crosses every card, so each card's interface needs the group that allows it).
    Only a `public` node (the head, unless spec.public_workers) gets a public IPv4 and the
    SSH-from-outside `ssh_groups`, on its primary interface; the others are reached through it.
    """

    def nic(card: int, **kw: Any) -> Any:
        return aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=0,
            subnet_id=subnet_id,
            security_groups=[*groups, *ssh_groups] if card == 0 and public else list(groups),
            delete_on_termination="true",  # typed str in the provider (facts §0.3)
            **kw,
        )

    # "false", not absent: absent falls back to the subnet's MapPublicIpOnLaunch.
    public_ip = "true" if public else "false"
    if primary_eni is not None:  # our own ENI (head_interface): subnet and groups are on it
        primary = aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=0,
            device_index=0,
            network_interface_id=primary_eni,
            delete_on_termination="false",  # the stack owns it; its Elastic IP stays on it
        )
    else:
        primary = nic(
            0,
            interface_type="efa" if efa_interfaces else None,  # None: a plain ENA
            # AWS assigns no public IPv4 to an instance with several NICs (facts §0.4).
            associate_public_ip_address=public_ip if efa_interfaces <= 1 else None,
        )
    return [primary] + [nic(card, interface_type="efa-only") for card in range(1, efa_interfaces)]


def reservation_target(reservation: str | None) -> Any:
    """Launch into this capacity reservation (and fail rather than fall back to on-demand)."""
    if not reservation:
        return None
    return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=reservation
        )
    )


def market_options(spec: ClusterSpec) -> Any:
    """Spot (one-time, terminated on interruption), a Capacity Block, or None: on-demand.

    A Capacity Block for ML is launched into with market type `capacity-block` next to its
    reservation id (EC2 user guide, capacity-blocks-launch: purchasing option "Capacity
    Blocks"; LaunchTemplateInstanceMarketOptions.MarketType: spot | capacity-block).
    """
    if spec.capacity_block:
        return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
    if spec.spot:
        return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="spot",
            spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                instance_interruption_behavior="terminate", spot_instance_type="one-time"
            ),
        )
    return None


def head_interface(name: str, net: Any, tags: dict[str, Any], opts: Any) -> Any:
    """The primary interface of a node with an Elastic IP, made by the stack, so the address
    goes on exactly the interface at network card 0, device index 0.

    On a multi-card type every card's interface has device index 0 (EC2 user guide,
    efa-acc-inst-types.md, p5: "network card index 0 ... device index 0" and each further card
    "device index 0" for its EFA-only interface; amazon-ec2-net-utils#104 shows two interfaces
    with device-number 0 on a p5), and an EFA-only interface takes no IP address (create-efa.md),
    so "the instance's primary interface" read back from EC2 can name one the address cannot go
    on. An interface made here and placed at card 0 / device 0 by the template cannot.
    """
    return aws.ec2.NetworkInterface(
        f"{name}-eni",
        subnet_id=net.subnet_id,
        security_groups=[*net.node_groups, *net.ssh_groups],
        interface_type="efa",
        description=f"{name}: network card 0, device index 0 (its Elastic IP is here)",
        tags={**tags, "Name": f"{name}-eni"},
        opts=opts,
    )


class AwsGpuFleet(GpufleetComponent):
    """A GPU fleet on AWS: nodes, network, expiry backstop, and the outputs to reach them."""

    _cloud = "aws"

    @staticmethod
    def _in_provider_region(spec: ClusterSpec, opts: pulumi.ResourceOptions | None) -> ClusterSpec:
        """The spec in its explicit provider's region (asked through it); a spec region that
        differs is refused: the resources would go to the provider's region regardless."""
        region = provider_region()
        if region is None:
            # The default provider: it puts the resources in its region whatever spec.region
            # says, so a region that differs is refused too (stackconfig does so for a stack).
            default = default_provider_region() if spec.region else None
            if default and default != spec.region:
                raise SpecError(
                    "region",
                    f"is {spec.region}, but the default AWS provider (the stack's aws:region) "
                    f"is in {default}: every resource would go to {default}",
                    f"drop region, or run `pulumi config set aws:region {spec.region}`, or "
                    f"give the fleet a provider for {spec.region} "
                    "(opts=ResourceOptions(provider=aws.Provider(..., region=...)))",
                )
            return spec
        if spec.region == region:
            return spec
        if spec.region:
            provider = explicit_provider(opts, "aws")
            raise SpecError(
                "region",
                f"is {spec.region}, but the fleet's AWS provider "
                f"({getattr(provider, '_name', 'explicit')}) is in {region}",
                f"drop region (the provider's is used), or give a provider for {spec.region}",
            )
        return spec.with_(region=region)

    def __init__(
        self, name: str, args: AwsGpuFleetArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        # The program's own VPC/subnets/groups may be Outputs: they stay out of the spec.
        plain, user = take_user_network(args)
        spec = spec_from_args(self._cloud, name, plain)
        replaced_groups = user is not None and user.groups is not None
        if not spec.ssh_cidrs and not replaced_groups:
            # The CLI fills in the caller's /32; a bare stack must name one.
            raise SpecError(
                "ssh_cidrs",
                "is empty; the security group would let SSH in from nowhere",
                "list the addresses allowed to SSH, e.g. ssh_cidrs: [203.0.113.7/32]",
            )
        it = lookup("aws", spec.instance_type or "")
        # Every lookup asks the provider the resources will use (its region and account).
        with asking(invoke_options(opts, "aws")), bringing(user):
            spec = self._in_provider_region(spec, opts)
            # A plain subnet_id fixes the zone: its own, read from EC2 (the offer check and
            # the reservation's zone are compared with it).
            in_subnet = subnet_zone(spec)
            spec = spec.with_(zone=in_subnet) if in_subnet else spec
            # Before anything is registered: a region or zone without the type fails here.
            offered = offer_check(self._cloud)(spec, it.name)
            zone, self.availability = offered.zone, offered.availability
            # The account (quota, image, roles): each refuses with its fix, or is skipped offline.
            self.checks = run_validators(spec, it)
            assert zone is not None  # EC2's check always picks the zone
            self.zone_fallback = zone_fallback(spec, it.name)
        super().__init__(name, spec, opts)
        lookups = pulumi.InvokeOptions(parent=self)
        tags = self.tags
        child = self.child()
        net = build_network(name, spec, tags, child, zone, user)

        # With a reservation, its own placement group (if it was made in one) or none: EC2
        # matches a reservation on its placement group, so a group of ours would miss it.
        group: pulumi.Input[str] | None = spec.placement_group
        if not spec.reservation:
            group = aws.ec2.PlacementGroup(
                f"{name}-pg", strategy="cluster", tags={**tags, "Name": f"{name}-pg"}, opts=child
            ).name
        ami = image_id(spec.image)
        market = market_options(spec)
        root = root_device(spec.image, lookups)
        # Only gpufleet's fixed tags go into the template's tag specifications: a template
        # change makes a new version and so a new instance, and neither a TTL change nor an
        # edit of the user's `tags` may (the instance's own tags, below, carry both and change
        # in place). Volumes and interfaces carry these only. The user's `tags` stay off the
        # template's own tags too: any change of those marks latest_version unknown in a
        # preview (terraform-provider-aws ec2_launch_template.go, CustomizeDiff
        # ComputedIf("latest_version") skips only name, name_prefix, description,
        # default_version, update_default_version), and the instance's CustomizeDiff forces a
        # new instance when the version it is given differs from its own: the preview would
        # show every node replaced. For the same reason the expiry stays off the template too:
        # each instance names its instance type itself (the template's), so the policy pack
        # judges the instance, which carries the expiry, and a TTL change replaces nothing.
        launch_tags = {k: tags[k] for k in LAUNCH_TAGS}
        template_tags = launch_tags
        # An ECR container image: the nodes' role may read that one repository (the boot pull
        # logs in with it); the templates wait for its policy. None for any other image.
        pulls = node_profile(name, spec, tags, child)
        template_opts = child
        if pulls is not None:
            template_opts = self.child(depends_on=[pulls.policy])

        instances, eips = [], []
        for i in range(spec.nodes):
            public = i == 0 or spec.public_workers
            eni = None
            if it.efa_interfaces > 1 and public:
                eni = head_interface(f"{name}-node-{i}", net, tags, child)
            nics = network_interfaces(
                it.efa_interfaces,
                net.subnet_id,
                net.node_groups,
                net.ssh_groups,
                public,
                primary_eni=eni.id if eni else None,
            )
            # One template per node: the user data (its own host key) and the head's NIC differ.
            template = aws.ec2.LaunchTemplate(
                f"{name}-node-{i}-lt",
                image_id=ami,
                instance_type=it.name,
                network_interfaces=nics,
                placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=group) if group else None,
                capacity_reservation_specification=reservation_target(spec.reservation),
                metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                    http_endpoint="enabled",
                    http_tokens="required",
                    http_put_response_hop_limit=2,
                    # The node reads its expiry from its own tag (images/ttl/gpufleet-expire).
                    instance_metadata_tags="enabled",
                ),
                block_device_mappings=[
                    aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                        device_name=root,
                        ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                            volume_size=spec.disk_gb,
                            volume_type="gp3",
                            encrypted="true",
                            delete_on_termination="true",
                        ),
                    )
                ],
                instance_market_options=market,
                # The node's TTL timer powers it off; AWS then terminates it (facts §1.9).
                instance_initiated_shutdown_behavior="terminate",
                iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(
                    arn=pulls.profile.arn
                )
                if pulls is not None
                else None,
                user_data=node_user_data(
                    spec, self.login_user, self.keys, i, spec.nodes, None
                ).apply(encode_user_data),
                tag_specifications=[
                    aws.ec2.LaunchTemplateTagSpecificationArgs(
                        resource_type=kind, tags={**launch_tags, "Name": f"{name}-node-{i}"}
                    )
                    for kind in ("instance", "volume", "network-interface")
                ],
                tags={**template_tags, "Name": f"{name}-node-{i}-lt"},
                opts=template_opts,
            )
            inst = aws.ec2.Instance(
                f"{name}-node-{i}",
                launch_template=aws.ec2.InstanceLaunchTemplateArgs(
                    id=template.id, version=template.latest_version.apply(lambda v: str(int(v)))
                ),
                instance_type=it.name,  # the template's: said here so a policy sees a GPU VM
                tags={**tags, "Name": f"{name}-node-{i}"},
                # Delete first: a replacement created beside the old node would need the
                # family's vCPU quota (and the placement group's capacity) twice, and our own
                # ENI is attached to one instance at a time.
                opts=self.child(delete_before_replace=True),
            )
            instances.append(inst)
            if eni is not None:
                # The head only by default: AWS's default quota is 5 EIPs per region.
                eips.append(
                    aws.ec2.Eip(
                        f"{name}-node-{i}-eip",
                        domain="vpc",
                        network_interface=eni.id,
                        tags={**tags, "Name": f"{name}-node-{i}-eip"},
                        # An EIP needs the VPC's internet gateway attached first.
                        opts=self.child(depends_on=net.gateways),
                    )
                )
        role, policy = backstop_role(name, aws_region(spec), tags, child)
        self.backstops = [
            terminate_at_expiry(
                f"{name}-node-{i}", aws_region(spec), role, policy, inst, self.expires_at, child
            )
            for i, inst in enumerate(instances)
        ]
        self.finish(
            [
                {
                    "private_ip": inst.private_ip,
                    "public_ip": (eips[i].public_ip if eips else inst.public_ip)
                    if i == 0 or spec.public_workers
                    else None,
                    "id": inst.id,
                    "host_key_at": inst.arn,  # its console shows its own host keys
                }
                for i, inst in enumerate(instances)
            ]
        )
