"""gpufleet's guard rails, pure functions over (type, props): GPU VMs expire, no open SSH."""

from __future__ import annotations

import functools
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EXPIRY_KEY = "gpufleet-expires"  # an AWS/Azure tag, a GCP label (components/fleet.py fleet_tags)
DEFAULT_MAX_HOURS = 24 * 7
EXPIRY_POLICY = "gpu-instances-expire"
SSH_POLICY = "no-ssh-from-anywhere"

# What the Policy SDK's property proxy holds for a value not known during preview
# (pulumi-policy's proxy.py UNKNOWN_*_VALUE): such a value neither passes nor fails.
PREVIEW_UNKNOWNS = frozenset(
    {
        "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",
        "3eeb2bf0-c639-47a8-9e75-3b44932eb421",
        "04da6b54-80e4-46f7-96ec-b56ff0331ba9",
        "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",
        "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",
    }
)

AWS_INSTANCES = ("aws:ec2/instance:Instance", "aws:ec2/spotInstanceRequest:SpotInstanceRequest")
# an instance made from a template without its own machineType is judged on the template
GCP_INSTANCES = (
    "gcp:compute/instance:Instance",
    "gcp:compute/instanceTemplate:InstanceTemplate",
    "gcp:compute/regionInstanceTemplate:RegionInstanceTemplate",
    "gcp:compute/instanceFromTemplate:InstanceFromTemplate",
)
AZURE_VM = "azure-native:compute:VirtualMachine"
AZURE_VMSS = "azure-native:compute:VirtualMachineScaleSet"  # its sku.name is the VM size

AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
GCP_FIREWALL = "gcp:compute/firewall:Firewall"
AZURE_NSG = "azure-native:network:NetworkSecurityGroup"
AZURE_NSG_RULE = "azure-native:network:SecurityRule"


class UnknownAtPreview(Exception):
    """A value the check needs is not known yet (preview): the check can neither pass nor fail."""

    def __init__(self, path: str):
        super().__init__(f"{path} can't be known during preview")
        self.path = path


@dataclass(frozen=True)
class Violation:
    policy: str
    message: str


def _known(value: Any, path: str) -> Any:
    if isinstance(value, str) and value in PREVIEW_UNKNOWNS:
        raise UnknownAtPreview(path)
    return value


# --- which instances are GPU instances --------------------------------------------------------


FAMILIES_FILE = Path(__file__).resolve().parent / "gpu_families.json"


@functools.lru_cache(maxsize=1)
def gpu_families() -> dict[str, frozenset[str]]:
    """Each cloud's GPU instance families, from gpu_families.json beside this file (made from
    gpufleet's catalog by gpufleet.provision.policypack.gpu_families_doc, so the pack needs
    nothing but the Policy SDK). AWS: the part before the dot (p4d, g5, ...). GCP: the machine
    series of types that carry their GPUs (a2, a3, g2); N1 gets its GPUs as guest accelerators,
    checked separately. Azure: the letters after Standard_ (NC, ND, NV)."""
    doc = json.loads(FAMILIES_FILE.read_text())
    return {cloud: frozenset(doc[cloud]) for cloud in ("aws", "gcp", "azure")}


def _family(cloud: str, machine_type: str) -> str | None:
    if cloud == "aws":
        return machine_type.split(".", 1)[0].lower()
    if cloud == "gcp":
        return machine_type.rsplit("/", 1)[-1].split("-", 1)[0].lower()
    m = re.match(r"(?i)standard_([a-z]+)\d", machine_type)
    return m.group(1).upper() if m else None


def _is_gpu_type(cloud: str, machine_type: Any) -> bool:
    if not isinstance(machine_type, str) or not machine_type:
        return False
    return _family(cloud, machine_type) in gpu_families()[cloud]


def gpu_instance(resource_type: str, props: Mapping[str, Any]) -> str | None:
    """The GPU machine type the resource launches, or None when it launches no GPU VM.

    AWS launch templates are not judged: a template launches nothing itself, and a tag on it
    (or in its tag specifications) would make every TTL change a new template version, which
    replaces the instances launched from it. The instance is judged, on its own instanceType
    (gpufleet's fleets set it beside the template's); one that takes its type from the
    template alone cannot be told a GPU instance here."""
    if resource_type in AWS_INSTANCES:
        t = _known(props.get("instanceType"), "instanceType")
        return t if _is_gpu_type("aws", t) else None
    if resource_type in GCP_INSTANCES:
        t = _known(props.get("machineType"), "machineType")
        accelerators = _known(props.get("guestAccelerators"), "guestAccelerators") or []
        if _is_gpu_type("gcp", t) or any(_known(a.get("count"), "count") for a in accelerators):
            return str(t)
        return None
    if resource_type == AZURE_VM:
        t = _known((props.get("hardwareProfile") or {}).get("vmSize"), "hardwareProfile.vmSize")
        return t if _is_gpu_type("azure", t) else None
    if resource_type == AZURE_VMSS:
        t = _known((props.get("sku") or {}).get("name"), "sku.name")
        return t if _is_gpu_type("azure", t) else None
    return None


# --- (a) every GPU instance expires within N hours --------------------------------------------


def _expiry_values(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """Where the resource carries gpufleet-expires: (where, value) pairs."""
    found: list[tuple[str, Any]] = []
    key = "labels" if resource_type in GCP_INSTANCES else "tags"
    own = _known(props.get(key), key)
    if isinstance(own, Mapping) and EXPIRY_KEY in own:
        found.append((f"{key}.{EXPIRY_KEY}", own[EXPIRY_KEY]))
    return found


def check_expiry(
    resource_type: str,
    props: Mapping[str, Any],
    *,
    now: float,
    max_hours: float = DEFAULT_MAX_HOURS,
) -> list[Violation]:
    """A GPU instance carries gpufleet-expires (epoch seconds) at most max_hours after now.

    Raises UnknownAtPreview when the expiry is not known yet (an Output of the stack's state):
    the engine then reports that the policy could not run rather than a pass or a violation."""
    machine = gpu_instance(resource_type, props)
    if machine is None:
        return []
    what = "label" if resource_type in GCP_INSTANCES else "tag"
    found = _expiry_values(resource_type, props)
    if not found:
        return [
            Violation(
                EXPIRY_POLICY,
                f"GPU instance ({machine}) has no `{EXPIRY_KEY}` {what}: set it to the epoch "
                f"second it must be gone by, at most {max_hours:g} h ahead "
                "(gpufleet's fleets set it)",
            )
        ]
    out = []
    for where, raw in found:
        value = _known(raw, where)
        try:
            at = float(value)
        except (TypeError, ValueError):
            out.append(
                Violation(
                    EXPIRY_POLICY,
                    f"GPU instance ({machine}): {where}={value!r} is not epoch seconds",
                )
            )
            continue
        hours = (at - now) / 3600
        if hours > max_hours:
            out.append(
                Violation(
                    EXPIRY_POLICY,
                    f"GPU instance ({machine}) expires {hours:.0f} h from now ({where}={value}); "
                    f"the most allowed is {max_hours:g} h: shorten its TTL",
                )
            )
    return out


# --- (b) no SSH from anywhere -----------------------------------------------------------------


def _anywhere(cidr: Any) -> bool:
    if not isinstance(cidr, str):
        return False
    text = cidr.strip()
    if text in ("*", "Internet", "Any", "any"):  # Azure's service tag / wildcard
        return True
    try:
        return ipaddress.ip_network(text, strict=False).prefixlen == 0
    except ValueError:
        return False


def _port_range_has_22(low: Any, high: Any, protocol: Any, where: str) -> bool:
    proto = str(_known(protocol, f"{where}.protocol")).lower()
    if proto in ("-1", "all", "*"):
        return True
    if proto not in ("tcp", "6"):
        return False
    low, high = _known(low, f"{where}.fromPort"), _known(high, f"{where}.toPort")
    try:
        return int(float(low)) <= 22 <= int(float(high))
    except (TypeError, ValueError):
        return False


def _ports_text_has_22(ports: Iterable[Any], where: str) -> bool:
    for p in ports:
        text = str(_known(p, where)).strip()
        if text in ("*", ""):
            return True
        low, _, high = text.partition("-")
        try:
            if int(low) <= 22 <= int(high or low):
                return True
        except ValueError:
            continue
    return False


def _aws_rule(rule: Mapping[str, Any], where: str) -> list[Violation]:
    protocol = rule.get("protocol", rule.get("ipProtocol"))
    if not _port_range_has_22(rule.get("fromPort"), rule.get("toPort"), protocol, where):
        return []
    cidrs = [
        *(_known(rule.get("cidrBlocks"), f"{where}.cidrBlocks") or []),
        *(_known(rule.get("ipv6CidrBlocks"), f"{where}.ipv6CidrBlocks") or []),
        rule.get("cidrIpv4"),  # aws:vpc/securityGroupIngressRule
        rule.get("cidrIpv6"),
    ]
    return [
        Violation(
            SSH_POLICY, f"{where} allows SSH (port 22) from {c}: name the addresses that need it"
        )
        for c in cidrs
        if _anywhere(_known(c, f"{where}.cidr"))
    ]


def _gcp_allow_has_22(allow: Mapping[str, Any], where: str) -> bool:
    proto = str(_known(allow.get("protocol"), f"{where}.protocol")).lower()
    if proto == "all":
        return True
    ports = _known(allow.get("ports"), f"{where}.ports") or ["*"]  # no ports: every port
    return proto in ("tcp", "6") and _ports_text_has_22(ports, f"{where}.ports")


def _gcp_firewall(props: Mapping[str, Any]) -> list[Violation]:
    """An INGRESS rule with none of sourceRanges, sourceTags and sourceServiceAccounts applies
    to every source, 0.0.0.0/0 (cloud.google.com/vpc/docs/firewalls, read 2026-11-25;
    hashicorp/terraform-provider-google#6789)."""
    if str(_known(props.get("direction"), "direction") or "INGRESS").upper() != "INGRESS":
        return []
    allows = _known(props.get("allows"), "allows") or []
    if not any(_gcp_allow_has_22(a, f"allows[{i}]") for i, a in enumerate(allows)):
        return []
    ranges = _known(props.get("sourceRanges"), "sourceRanges") or []
    others = [_known(props.get(k), k) for k in ("sourceTags", "sourceServiceAccounts")]
    if not ranges and not any(others):
        return [
            Violation(
                SSH_POLICY,
                "firewall allows tcp:22 from 0.0.0.0/0 (an ingress rule with no sourceRanges, "
                "sourceTags or sourceServiceAccounts applies to every source): name the "
                "addresses that need it in sourceRanges",
            )
        ]
    return [
        Violation(SSH_POLICY, f"firewall allows tcp:22 from {c}: name the addresses that need it")
        for c in ranges
        if _anywhere(_known(c, "sourceRanges"))
    ]


def check_ssh(resource_type: str, props: Mapping[str, Any]) -> list[Violation]:
    """No ingress rule lets port 22 in from 0.0.0.0/0, ::/0, * or Internet.

    Raises UnknownAtPreview when a value that decides it (a protocol, a port, a source) is not
    known yet: like the expiry, neither a pass nor a violation."""
    if resource_type == AWS_SG:
        return [
            v
            for i, rule in enumerate(_known(props.get("ingress"), "ingress") or [])
            for v in _aws_rule(rule, f"ingress[{i}]")
        ]
    if resource_type == AWS_SG_RULE:
        kind = _known(props.get("type"), "type")
        return _aws_rule(props, "rule") if kind == "ingress" else []
    if resource_type == AWS_SG_INGRESS:
        return _aws_rule(props, "ingress rule")
    if resource_type == GCP_FIREWALL:
        return _gcp_firewall(props)
    if resource_type == AZURE_NSG:
        return [
            v
            for i, rule in enumerate(_known(props.get("securityRules"), "securityRules") or [])
            for v in _azure_rule(rule, f"securityRules[{i}] ({rule.get('name', '?')})")
        ]
    if resource_type == AZURE_NSG_RULE:
        return _azure_rule(props, f"security rule {props.get('name', '')}".strip())
    return []


def _azure_rule(rule: Mapping[str, Any], where: str) -> list[Violation]:
    if (
        str(_known(rule.get("direction", ""), f"{where}.direction")).lower() != "inbound"
        or str(_known(rule.get("access", ""), f"{where}.access")).lower() != "allow"
    ):
        return []
    if str(_known(rule.get("protocol", "*"), f"{where}.protocol")).lower() not in ("tcp", "*"):
        return []
    ports = [
        rule.get("destinationPortRange"),
        *(_known(rule.get("destinationPortRanges"), f"{where}.ports") or []),
    ]
    if not _ports_text_has_22((p for p in ports if p is not None), f"{where}.ports"):
        return []
    sources = [
        rule.get("sourceAddressPrefix"),
        *(_known(rule.get("sourceAddressPrefixes"), f"{where}.sources") or []),
    ]
    return [
        Violation(
            SSH_POLICY, f"{where} allows SSH (port 22) from {s}: name the addresses that need it"
        )
        for s in sources
        if _anywhere(_known(s, f"{where}.source"))
    ]


# --- both, over a list of resources -----------------------------------------------------------


def check_resource(
    resource_type: str,
    props: Mapping[str, Any],
    *,
    now: float,
    max_hours: float = DEFAULT_MAX_HOURS,
) -> list[Violation]:
    return check_expiry(resource_type, props, now=now, max_hours=max_hours) + check_ssh(
        resource_type, props
    )


def check_resources(
    resources: Iterable[Any],
    *,
    now: float,
    max_hours: float = DEFAULT_MAX_HOURS,
    name: Callable[[Any], str] = lambda r: r.name,
) -> list[tuple[str, Violation]]:
    """(resource name, violation) for every violation in resources with .type and .inputs."""
    return [
        (name(r), v)
        for r in resources
        for v in check_resource(r.type, r.inputs, now=now, max_hours=max_hours)
    ]
