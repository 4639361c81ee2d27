"""Secrets on shared backends: a bucket backend gets the team's KMS or a shared passphrase, never
this machine's generated one; and `up` runs gpufleet's policy pack.

Pulumi's object-storage backends default to the passphrase provider; a cloud secrets provider is
chosen with `pulumi stack init --secrets-provider=awskms://...|gcpkms://...|azurekeyvault://...`
(pulumi.com/docs/iac/cli/commands/pulumi_stack_init, read 2026-11-25). The Automation API
passes it as LocalWorkspaceOptions(secrets_provider=...) to `stack init`, and stack.up's
policy_packs=[...] as `--policy-pack` (pulumi 3.272 automation/_local_workspace.py
create_stack, automation/_stack.py _parse_extra_args).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.provision import pulumi as pp
from gpufleet.provision import secrets

ROOT = Path(__file__).resolve().parents[3]
AWS_KMS = "awskms://alias/team?region=us-east-1"
GCP_KMS = "gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k"
AZURE_KV = "azurekeyvault://v.vault.azure.net/keys/k"


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE", raising=False)
    monkeypatch.delenv("GPUFLEET_SECRETS_PROVIDER", raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    "backend, given, provider, passphrase",
    [
        ("file:///home/me/.gpufleet/pulumi", None, None, True),  # today's behaviour
        ("s3://team-state", AWS_KMS, AWS_KMS, False),
        ("gs://team-state", GCP_KMS, GCP_KMS, False),
        ("azblob://team-state", AZURE_KV, AZURE_KV, False),
        ("https://api.pulumi.com", None, None, True),  # Pulumi Cloud's own provider
    ],
)  # fmt: skip
def test_each_backend_gets_its_secrets_provider(env, backend, given, provider, passphrase):
    chosen = secrets.choose(backend, given)
    assert (chosen.provider, chosen.passphrase) == (provider, passphrase)


def test_the_provider_may_come_from_the_environment(env):
    env.setenv("GPUFLEET_SECRETS_PROVIDER", "awskms://alias/team?region=eu-west-1")
    assert secrets.choose("s3://b").provider == "awskms://alias/team?region=eu-west-1"


def test_a_shared_passphrase_is_the_fallback_on_a_bucket(env):
    env.setenv("PULUMI_CONFIG_PASSPHRASE", "team secret")
    chosen = secrets.choose("gs://b")
    assert (chosen.provider, chosen.passphrase) == ("passphrase", True)
    assert "PULUMI_CONFIG_PASSPHRASE" in chosen.why


@pytest.mark.parametrize(
    "backend, example",
    [("s3://b", "awskms://"), ("gs://b", "gcpkms://"), ("azblob://b", "azurekeyvault://")],
)
def test_a_bucket_without_shared_secrets_is_refused_naming_the_flag(env, backend, example):
    with pytest.raises(secrets.NoSharedSecrets) as e:
        secrets.choose(backend)
    assert e.value.exit_code == 2
    assert "--secrets-provider '" + example in e.value.hint
    assert (
        "GPUFLEET_SECRETS_PROVIDER" in e.value.hint and "PULUMI_CONFIG_PASSPHRASE" in e.value.hint
    )


def test_not_a_secrets_provider_is_refused(env):
    with pytest.raises(pp.GpufleetError, match="not a Pulumi secrets provider"):
        secrets.choose("s3://b", "kms:alias/x")


def test_destroy_and_list_on_a_bucket_keep_the_stacks_own_provider(env):
    chosen = secrets.choose("s3://b", strict=False)
    assert chosen.provider is None  # `stack select` reads it from the stack's state


def test_workspace_options_carry_the_provider_and_no_local_passphrase(env, gpufleet_home):
    chosen = secrets.choose("s3://b", "awskms://alias/team?region=us-east-1")
    opts = pp._workspace_options("s3://b", chosen)
    assert opts["secrets_provider"] == "awskms://alias/team?region=us-east-1"
    assert "PULUMI_CONFIG_PASSPHRASE" not in opts["env_vars"]
    assert not (gpufleet_home / "pulumi-passphrase").exists()
    local = pp._workspace_options(f"file://{gpufleet_home}/pulumi")
    assert local["secrets_provider"] is None and local["env_vars"]["PULUMI_CONFIG_PASSPHRASE"]


def spec(**kw) -> ClusterSpec:
    base = {"name": "t", "cloud": "aws", "nodes": 2, "instance_type": "p4d.24xlarge",
            "ssh_cidrs": ["203.0.113.7/32"]}  # fmt: skip
    return ClusterSpec.from_input({**base, **kw})


class Stack:
    """A fake stack recording what `up` hands the Automation API."""

    def __init__(self, calls):
        self.calls, self.name = calls, "t"
        self.workspace = self

    def set_config(self, *_):
        pass

    def get_all_config(self):
        return {}

    def up(self, **kw):
        self.calls.append(("up", kw))
        raise RuntimeError("stop here")  # the outputs are other tests' concern

    def destroy(self, **_):
        self.calls.append(("destroy", {}))

    def remove_stack(self, _name):
        pass


def run_up(monkeypatch, s: ClusterSpec, backend: str, provider: str | None = None):
    calls: list = []
    monkeypatch.setattr(pp, "find_pulumi", lambda: "/bin/pulumi")
    monkeypatch.setattr(pp, "_import_sdk", lambda cloud=None: None)
    monkeypatch.setattr(pp.hostkeypin, "require_channel", lambda cloud: None)

    def fake_stack(sp, b, program=None, secrets=None):
        calls.append(("stack", secrets))
        return Stack(calls)

    monkeypatch.setattr(pp, "_stack", fake_stack)
    monkeypatch.setattr(pp, "stack_resources", lambda name, backend: None)  # no such stack yet
    # pulumi-policy (the `pulumi` extra) may be missing from this venv; the pack's own tests
    # run it (tests/policy)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "pulumi_policy" else real(n, *a)
    )
    lines: list[str] = []
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner(backend, provider).up(s, lines.append)
    calls.append(("progress", lines))
    return calls, e.value


def test_up_on_a_bucket_without_shared_secrets_creates_nothing(env, gpufleet_home):
    calls, err = run_up(env, spec(), "s3://team-state")
    assert isinstance(err, secrets.NoSharedSecrets)
    assert calls == [("progress", [])]  # no stack, no pulumi


def test_up_hands_the_kms_provider_and_the_policy_pack_to_the_automation_api(env, gpufleet_home):
    calls, _ = run_up(env, spec(), "s3://team-state", "awskms://alias/team?region=us-east-1")
    (kind, chosen), (up, kw) = calls[0], calls[1]
    assert kind == "stack" and chosen.provider == "awskms://alias/team?region=us-east-1"
    assert up == "up" and kw["policy_packs"] == [str(ROOT / "policy")]
    assert (ROOT / "policy" / "PulumiPolicy.yaml").is_file()
    assert "policy_pack_configs" not in kw  # a 4 h TTL is within the pack's week
    said = calls[-1][1][0]
    assert "secrets provider awskms://alias/team" in said and "policy pack gpufleet" in said


def test_a_ttl_over_the_packs_week_is_allowed_by_its_config(env, gpufleet_home):
    calls, _ = run_up(env, spec(ttl_minutes=10 * 24 * 60), f"file://{gpufleet_home}/pulumi")
    kw = calls[1][1]
    assert calls[0] == ("stack", None)  # local backend: today's passphrase
    (path,) = kw["policy_pack_configs"]
    assert json.loads(Path(path).read_text()) == {"gpu-instances-expire": {"maxHours": 241.0}}
