"""The pack's wiring: its callbacks report the checks' messages (needs pulumi-policy)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pulumi_policy")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "policy"))

import gpufleet_pack  # noqa: E402
from pulumi_policy import ResourceValidationArgs  # noqa: E402
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy  # noqa: E402

NOW = 1_900_000_000


def run(policy, rtype: str, props: dict, config: dict | None = None) -> list[str]:
    reported: list[str] = []
    args = ResourceValidationArgs(
        rtype, unknown_checking_proxy(props), "urn", "r", None, None, config
    )
    policy.validate(args, lambda message, urn=None: reported.append(message))
    return reported


def test_the_pack_reports_an_open_ssh_rule_and_a_far_expiry():
    expiry, ssh = gpufleet_pack.policies(now=lambda: NOW)
    far = {"instanceType": "p4d.24xlarge", "tags": {"gpufleet-expires": str(NOW + 30 * 86400)}}
    assert run(expiry, "aws:ec2/instance:Instance", far)[0].startswith(
        "GPU instance (p4d.24xlarge) expires 720 h from now"
    )
    assert run(expiry, "aws:ec2/instance:Instance", far, {"maxHours": 24 * 31}) == []
    fw = {"allows": [{"protocol": "tcp", "ports": ["22"]}], "sourceRanges": ["0.0.0.0/0"]}
    assert run(ssh, "gcp:compute/firewall:Firewall", fw) == [
        "firewall allows tcp:22 from 0.0.0.0/0: name the addresses that need it"
    ]


def test_an_unknown_expiry_is_the_engines_cannot_run_during_preview():
    expiry, _ = gpufleet_pack.policies(now=lambda: NOW)
    props = {
        "instanceType": "p4d.24xlarge",
        "tags": {"gpufleet-expires": "04da6b54-80e4-46f7-96ec-b56ff0331ba9"},
    }
    with pytest.raises(UnknownValueError):
        run(expiry, "aws:ec2/instance:Instance", props)
