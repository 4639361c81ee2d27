"""The pack's wiring: its callbacks report the checks' messages, with the real Policy SDK.

pulumi-policy pins protobuf and grpcio below the cloud SDKs', so (as Pulumi gives a pack its own
virtualenv) it lives in build/policy-sdk (`make deps-test`); the test that pytest collects in the
project's environment runs this file again in a Python whose path starts there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "build" / "policy-sdk"
IN_PACK_ENV = os.environ.get("GPUFLEET_POLICY_SDK_RUN") == "1"


def test_the_pack_runs_with_the_policy_sdk_in_its_own_environment():
    if IN_PACK_ENV:
        pytest.skip("this is the inner run")
    assert (SDK / "pulumi_policy").is_dir(), f"no Policy SDK in {SDK}: run `make deps-test`"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SDK), str(ROOT)]),
        "GPUFLEET_POLICY_SDK_RUN": "1",
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", __file__],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for wiring in (
        "test_the_pack_reports_an_open_ssh_rule_and_a_far_expiry",
        "test_an_unknown_expiry_is_the_engines_cannot_run_during_preview",
    ):  # each ran in the pack's environment, not skipped
        assert f"PASSED tests/policy/test_pack.py::{wiring}" in done.stdout, done.stdout[-2000:]


SELF_CONTAINED = """
import sys
sys.path[:0] = [SDK, PACK]
import gpufleet_pack
from pulumi_policy import ResourceValidationArgs
from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy
leaked = sorted(m for m in sys.modules if m.split(".")[0] in ("gpufleet", "components"))
expiry, ssh = gpufleet_pack.policies(now=lambda: 1_900_000_000)
said = []
props = {"instanceType": "g4ad.xlarge", "tags": {}}
args = ResourceValidationArgs("aws:ec2/instance:Instance", unknown_checking_proxy(props),
                              "urn", "r", None, None, None)
expiry.validate(args, lambda message, urn=None: said.append(message))
props = {"allows": [{"protocol": "tcp", "ports": ["3eeb2bf0-c639-47a8-9e75-3b44932eb421"]}],
         "sourceRanges": ["0.0.0.0/0"]}
args = ResourceValidationArgs("gcp:compute/firewall:Firewall", unknown_checking_proxy(props),
                              "urn", "r", None, None, None)
try:
    ssh.validate(args, lambda message, urn=None: said.append(message))
except UnknownValueError as e:
    said.append("unknown: " + e.message)
import json
print(json.dumps([leaked, said]))
"""


def test_the_pack_runs_on_the_policy_sdk_and_the_standard_library_alone():
    """As in the pack's own virtualenv (requirements.txt: pulumi-policy only): no site-packages
    (-S), only the SDK's folder and the pack's; nothing of gpufleet is importable or imported."""
    if IN_PACK_ENV:
        pytest.skip("this is the outer run's")
    assert (SDK / "pulumi_policy").is_dir(), f"no Policy SDK in {SDK}: run `make deps-test`"
    code = f"SDK, PACK = {str(SDK)!r}, {str(ROOT / 'policy')!r}\n" + SELF_CONTAINED
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=ROOT / "policy",
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    leaked, said = json.loads(done.stdout)
    assert leaked == []
    assert said[0].startswith("GPU instance (g4ad.xlarge) has no `gpufleet-expires` tag")
    assert said[1].startswith("unknown: ") and "allows.0.ports.0" in said[1], said


if IN_PACK_ENV:
    sys.path.insert(0, str(ROOT / "policy"))
    import gpufleet_pack
    from pulumi_policy import ResourceValidationArgs
    from pulumi_policy.proxy import UnknownValueError, unknown_checking_proxy

NOW = 1_900_000_000


def run(policy, rtype: str, props: dict, config: dict | None = None) -> list[str]:
    reported: list[str] = []
    args = ResourceValidationArgs(
        rtype, unknown_checking_proxy(props), "urn", "r", None, None, config
    )
    policy.validate(args, lambda message, urn=None: reported.append(message))
    return reported


@pytest.mark.skipif(not IN_PACK_ENV, reason="runs in the pack's environment (test above)")
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


@pytest.mark.skipif(not IN_PACK_ENV, reason="runs in the pack's environment (test above)")
def test_an_unknown_expiry_is_the_engines_cannot_run_during_preview():
    expiry, _ = gpufleet_pack.policies(now=lambda: NOW)
    props = {
        "instanceType": "p4d.24xlarge",
        "tags": {"gpufleet-expires": "04da6b54-80e4-46f7-96ec-b56ff0331ba9"},
    }
    with pytest.raises(UnknownValueError):
        run(expiry, "aws:ec2/instance:Instance", props)
