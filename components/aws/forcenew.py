"""AWS: which input changes replace a resource, per terraform-provider-aws (bridged)."""

from __future__ import annotations

from gpufleet.components.replacements import Follow, ForceNew

# Sources (read 2026-11-25), hashicorp/terraform-provider-aws, internal/service/ec2/:
# - ec2_instance.go: `launch_template` with ForceNew id/name, and CustomizeDiff calling
#   diff.ForceNew("launch_template.0.version") when the instance's template version differs from
#   the one asked for (an explicit number, "$Latest" or "$Default"); subnet_id, private_ip,
#   security_groups, tenancy, availability_zone, placement_group: ForceNew.
# - ec2_launch_template.go: an update of any template field creates a new template version
#   (CreateLaunchTemplateVersion) and moves latest_version; only `name` is ForceNew.
#   The subtlety: gpufleet's instances ask for the template's latest_version, so a changed user
#   data (the recipe, or the expiry written into it) makes version N+1, the instance's
#   launch_template.version changes, and the instance is replaced.
# - vpc.go (cidr_block), subnet.go (vpc_id, cidr_block, availability_zone), vpc_security_group.go
#   (name, description, vpc_id), vpc_nat_gateway.go (allocation_id, subnet_id),
#   ec2_placement_group.go (name, strategy), vpc_route_table.go (vpc_id),
#   vpc_route_table_association.go (subnet_id), ec2_eip.go (domain): ForceNew.
TABLE = ForceNew(
    force_new={
        "aws:ec2/instance:Instance": (
            "launchTemplate.id",
            "launchTemplate.name",
            "launchTemplate.version",
            "subnetId",
            "privateIp",
            "securityGroups",
            "tenancy",
            "availabilityZone",
            "placementGroup",
            "ami",
        ),
        "aws:ec2/launchTemplate:LaunchTemplate": ("name",),
        "aws:ec2/vpc:Vpc": ("cidrBlock",),
        "aws:ec2/subnet:Subnet": ("vpcId", "cidrBlock", "availabilityZone"),
        "aws:ec2/securityGroup:SecurityGroup": ("name", "description", "vpcId"),
        "aws:ec2/natGateway:NatGateway": ("allocationId", "subnetId"),
        "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy"),
        "aws:ec2/routeTable:RouteTable": ("vpcId",),
        "aws:ec2/routeTableAssociation:RouteTableAssociation": ("subnetId",),
        "aws:ec2/eip:Eip": ("domain",),
    },
    versioned={
        "aws:ec2/launchTemplate:LaunchTemplate": (
            "a new launch template version; the instance asks for the latest, so it is replaced"
        ),
    },
    # ec2_launch_template.go's update: tags and tags_all alone go through UpdateTags, no new
    # version (the instances' launch tags, tagSpecifications, are template content and do).
    unversioned={"aws:ec2/launchTemplate:LaunchTemplate": ("tags", "tagsAll")},
    follows={
        "aws:ec2/instance:Instance": (Follow("launchTemplate.version", "launchTemplate.id"),),
    },
    nodes=("aws:ec2/instance:Instance",),
    labels={
        "userData": "user data",
        "imageId": "image",
        "tagSpecifications": "launch tags",
        "blockDeviceMappings": "root disk",
        "instanceType": "instance type",
        "networkInterfaces": "network interfaces",
        "launchTemplate.version": "launch template version",
        "tags": "tags",
    },
    kinds={"aws:ec2/launchTemplate:LaunchTemplate": "launch template"},
)
