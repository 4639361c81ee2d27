"""A Pulumi program composing gpufleet's AWS fleet with its own VPC and an explicit provider."""

import pulumi
import pulumi_aws as aws

from gpufleet.components.aws import AwsGpuFleet, AwsGpuFleetArgs

REGION = "us-east-2"
ZONE = "us-east-2b"  # the subnet's zone, where the fleet's cluster placement group lives


def main() -> AwsGpuFleet:
    ssh_cidrs = pulumi.Config().get_object("sshCidrs") or ["203.0.113.7/32"]
    # Another region than the stack's aws:region: every resource AND lookup must go here.
    use2 = aws.Provider("use2", region=REGION)
    on_use2 = pulumi.ResourceOptions(provider=use2)

    vpc = aws.ec2.Vpc(
        "lab-vpc",
        cidr_block="10.80.0.0/16",
        enable_dns_hostnames=True,
        enable_dns_support=True,
        opts=on_use2,
    )
    igw = aws.ec2.InternetGateway("lab-igw", vpc_id=vpc.id, opts=on_use2)
    subnet = aws.ec2.Subnet(
        "lab-gpu", vpc_id=vpc.id, cidr_block="10.80.0.0/22", availability_zone=ZONE, opts=on_use2
    )
    routes = aws.ec2.RouteTable(
        "lab-routes",
        vpc_id=vpc.id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
        opts=on_use2,
    )
    assoc = aws.ec2.RouteTableAssociation(
        "lab-gpu-routes", subnet_id=subnet.id, route_table_id=routes.id, opts=on_use2
    )
    # A group of the program's own, added to every node beside gpufleet's (node exporter).
    metrics = aws.ec2.SecurityGroup(
        "lab-metrics",
        vpc_id=vpc.id,
        description="node exporter from inside the VPC",
        ingress=[
            aws.ec2.SecurityGroupIngressArgs(
                protocol="tcp", from_port=9100, to_port=9100, cidr_blocks=["10.80.0.0/16"]
            )
        ],
        opts=on_use2,
    )

    fleet = AwsGpuFleet(
        "lab",
        AwsGpuFleetArgs(
            instance_type="p5.48xlarge",
            nodes=2,
            zone=ZONE,
            # Every node has a public address: the subnet routes through the internet
            # gateway, no NAT (private workers need a 0.0.0.0/0 route to a NAT gateway, and
            # a route to the internet gateway for each ssh_cidr: the head answers SSH from
            # the same subnet).
            public_workers=True,
            ssh_cidrs=ssh_cidrs,
            vpc_id=vpc.id,  # Outputs of this program's resources
            subnet_ids=[subnet.id],
            extra_security_group_ids=[metrics.id],
            tags={"team": "research"},
        ),
        # Elastic IPs need the internet gateway attached and routed first.
        opts=pulumi.ResourceOptions(provider=use2, depends_on=[assoc]),
    )
    pulumi.export("head", fleet.nodes.apply(lambda ns: ns[0]["public_ip"]))
    pulumi.export("ssh_user", fleet.ssh_user)
    pulumi.export("nodes", fleet.nodes)
    pulumi.export("known_hosts", fleet.known_hosts)
    pulumi.export("ssh_private_key", fleet.ssh_private_key)
    pulumi.export("expires_at", fleet.expires_at)
    return fleet


if __name__ == "__main__":  # `pulumi up` runs this file as __main__
    main()
