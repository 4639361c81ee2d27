"""Where a cloud node publishes the host keys it made: the CLI command that asks, and its parser."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass

from gpufleet.components.bootstrap import HOST_KEY_CHANNEL
from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError

# The one key type gpufleet pins (docs/decisions.md); the channels publish every type.
PINNED_TYPE = "ssh-ed25519"

# cloud-init's keys_to_console block (tools/write-ssh-key-fingerprints), on the serial console.
_BEGIN = "-----BEGIN SSH HOST KEY KEYS-----"
_KEYS_BLOCK = re.compile(re.escape(_BEGIN) + r"(.*?)-----END SSH HOST KEY KEYS-----", re.S)
_KEY_TYPE = re.compile(r"^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp\d+|sk-\S+@openssh\.com)$")
_B64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


def _wire_ok(ktype: str, b64: str) -> bool:
    """b64 decodes to a whole SSH public key blob of type ktype (RFC 4253 6.6: strings)."""
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return False
    fields, i = [], 0
    while i < len(blob):
        if i + 4 > len(blob):
            return False
        n = int.from_bytes(blob[i : i + 4], "big")
        if i + 4 + n > len(blob):
            return False
        fields.append(blob[i + 4 : i + 4 + n])
        i += 4 + n
    if not fields or fields[0] != ktype.encode():
        return False
    return ktype != PINNED_TYPE or (len(fields) == 2 and len(fields[1]) == 32)


def _keys_in(tokens: list[str]) -> list[str]:
    """'type base64' keys in a whitespace-split block whose lines a console may have wrapped
    (at 80 columns, inside the base64 or before the comment): the shortest run of base64
    tokens after a type token that is a whole key blob."""
    keys = []
    for i, tok in enumerate(tokens):
        if not _KEY_TYPE.match(tok):
            continue
        b64 = ""
        for part in tokens[i + 1 :]:
            if not _B64.match(part):
                break
            b64 += part
            if _wire_ok(tok, b64):
                keys.append(f"{tok} {b64}")
                break
    return keys


class AmbiguousHostKeys(GpufleetError):
    """A console shows more than one host key block: which one cloud-init printed is unknown."""

    exit_code = ExitCode.HOST_KEY


def from_console(text: str) -> list[str]:
    """Host public keys ('type base64') from a serial console: EC2's console output, Azure's
    serial log. cloud-init prints its block once per instance, at first boot (keys_to_console
    is per instance); a second BEGIN marker was written by someone else (anyone who may type
    on the serial console, at a login prompt that may come first): refused, never guessed."""
    text = text.replace("\r", "")
    begins = text.count(_BEGIN)
    if begins > 1:
        raise AmbiguousHostKeys(
            f"ambiguous host key block: the console shows {begins} '{_BEGIN}' markers, and"
            " cloud-init prints one",
            hint="check the node's console output for who wrote the others (serial console"
            " access), or create the cluster with GPUFLEET_HOST_KEYS=bootstrap",
        )
    blocks = _KEYS_BLOCK.findall(text)
    return _keys_in(blocks[0].split()) if blocks else []


def from_guest_attributes(text: str) -> list[str]:
    """Host public keys from GCE guest attributes under hostkeys/: the REST answer of
    instances.getGuestAttributes ({"queryValue": {"items": [...]}}) or gcloud's JSON list of
    its items; each item's key is the type and its value the base64 (google-guest-agent)."""
    text = text.strip()
    if not text:
        return []
    doc = json.loads(text)
    if isinstance(doc, dict):
        doc = (doc.get("queryValue") or {}).get("items") or []
    keys = []
    for item in doc:
        ktype, b64 = str(item.get("key", "")), str(item.get("value", "")).strip()
        if item.get("namespace", "hostkeys") == "hostkeys" and _wire_ok(ktype, b64):
            keys.append(f"{ktype} {b64}")
    return keys


def pinned_key(keys: list[str]) -> str | None:
    """The ed25519 key among `keys`, the one gpufleet pins."""
    return next((k for k in keys if k.split()[0] == PINNED_TYPE), None)


@dataclass(frozen=True)
class Channel:
    """One cloud's channel: the CLI tool that reads it, and how its answer is parsed."""

    tool: str
    what: str  # for messages
    install: str  # the fix when the tool is missing

    def command(self, at: str) -> list[str]:
        raise NotImplementedError

    def parse(self, text: str) -> list[str]:
        raise NotImplementedError


class GceGuestAttributes(Channel):
    def command(self, at: str) -> list[str]:
        m = re.search(r"projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$", at)
        if not m:
            raise GpufleetError(f"not a GCE instance self link: {at!r}")
        project, zone, name = m.groups()
        return [
            "gcloud", "compute", "instances", "get-guest-attributes", name,
            f"--zone={zone}", f"--project={project}", "--query-path=hostkeys/", "--format=json",
        ]  # fmt: skip

    def parse(self, text: str) -> list[str]:
        return from_guest_attributes(text)


class Ec2Console(Channel):
    def command(self, at: str) -> list[str]:
        m = re.match(r"arn:aws[\w-]*:ec2:([^:]+):[^:]*:instance/(i-[0-9a-f]+)$", at)
        if not m:
            raise GpufleetError(f"not an EC2 instance ARN: {at!r}")
        region, instance = m.groups()
        # --latest: the most recent output (Nitro); --output text decodes the base64 answer
        return [
            "aws", "ec2", "get-console-output", f"--instance-id={instance}",
            f"--region={region}", "--latest", "--query=Output", "--output=text",
        ]  # fmt: skip

    def parse(self, text: str) -> list[str]:
        return from_console(text)


class AzureSerialLog(Channel):
    def command(self, at: str) -> list[str]:
        if not re.match(r"^/subscriptions/[^/]+/resourceGroups/.+/virtualMachines/[^/]+$", at):
            raise GpufleetError(f"not an Azure VM resource id: {at!r}")
        return ["az", "vm", "boot-diagnostics", "get-boot-log", "--ids", at]

    def parse(self, text: str) -> list[str]:
        return from_console(text)


CHANNELS: dict[str, Channel] = {
    "guest-attributes": GceGuestAttributes(
        "gcloud", "GCE guest attributes hostkeys/", "install the Google Cloud CLI and log in"
    ),
    "console": Ec2Console(
        "aws", "the EC2 console output", "install the AWS CLI v2 and configure its credentials"
    ),
    "serial-log": AzureSerialLog(
        "az", "the boot diagnostics serial log", "install the Azure CLI and run `az login`"
    ),
}


def channel(cloud: str) -> Channel | None:
    """The cloud's host key channel; None where nodes get a bootstrap key (local, vm, ssh)."""
    name = HOST_KEY_CHANNEL.get(cloud)
    return CHANNELS[name] if name else None
