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
    monkeypatch.delenv("PULUMI_CONFIG_PASSPHRASE_FILE", raising=False)
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
    """A fake stack recording what `up` hands the Automation API; `state_provider` is the
    secrets_providers its exported state names (None: a new stack, no deployment yet)."""

    state_provider: dict | None = None

    def __init__(self, calls):
        self.calls, self.name = calls, "t"
        self.workspace = self

    def export_stack(self):
        from types import SimpleNamespace

        found = {"secrets_providers": self.state_provider} if self.state_provider else {}
        return SimpleNamespace(version=3, deployment=found)

    def set_config(self, *_):
        pass

    def get_all_config(self):
        return {}

    def up(self, **kw):
        configs = [json.loads(Path(p).read_text()) for p in kw.get("policy_pack_configs", [])]
        self.calls.append(("up", {**kw, "configs read during up": configs}))
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
    lines: list[str] = []
    with pytest.raises(pp.GpufleetError) as e:
        pp.PulumiProvisioner(backend, provider).up(s, lines.append)
    calls.append(("progress", lines))
    return calls, e.value


def test_up_on_a_bucket_without_shared_secrets_creates_nothing(env, gpufleet_home):
    calls, err = run_up(env, spec(), "s3://team-state")
    assert isinstance(err, secrets.NoSharedSecrets)
    assert calls == [("progress", [])]  # no stack, no pulumi


def test_up_hands_the_kms_provider_and_the_policy_pack_to_the_automation_api(
    env, gpufleet_home, policy_pack_prepared
):
    calls, _ = run_up(env, spec(), "s3://team-state", "awskms://alias/team?region=us-east-1")
    (kind, chosen), (up, kw) = calls[0], calls[1]
    assert kind == "stack" and chosen.provider == "awskms://alias/team?region=us-east-1"
    # the prepared pack (tests/conftest.py's stand-in; test_policypack.py prepares a real one)
    assert up == "up" and kw["policy_packs"] == [str(policy_pack_prepared)]
    assert "policy_pack_configs" not in kw  # a 4 h TTL is within the pack's week
    said = calls[-1][1][0]
    assert "secrets provider awskms://alias/team" in said and "policy pack gpufleet" in said


def test_a_ttl_over_the_packs_week_is_allowed_by_its_config(env, gpufleet_home):
    calls, _ = run_up(env, spec(ttl_minutes=10 * 24 * 60), f"file://{gpufleet_home}/pulumi")
    kw = calls[1][1]
    assert calls[0] == ("stack", None)  # local backend: today's passphrase
    (path,) = kw["policy_pack_configs"]
    assert kw["configs read during up"] == [{"gpu-instances-expire": {"maxHours": 241.0}}]
    assert not Path(path).exists()  # removed after use


# Pulumi reads the passphrase from PULUMI_CONFIG_PASSPHRASE, else from the file
# PULUMI_CONFIG_PASSPHRASE_FILE names (pulumi/pulumi pkg/secrets/passphrase/manager.go
# readPassphrase, commit 1b59498, read 2026-11-25).
def test_a_passphrase_file_counts_as_a_shared_passphrase(env, gpufleet_home, tmp_path):
    phrase = tmp_path / "team-passphrase"
    phrase.write_text("team secret\n")
    env.setenv("PULUMI_CONFIG_PASSPHRASE_FILE", str(phrase))
    chosen = secrets.choose("s3://team-state")  # no NoSharedSecrets
    assert (chosen.provider, chosen.passphrase) == ("passphrase", True)
    assert "PULUMI_CONFIG_PASSPHRASE_FILE" in chosen.why
    # Pulumi reads the file itself: no generated passphrase may shadow it
    opts = pp._workspace_options("s3://team-state", chosen)
    assert "PULUMI_CONFIG_PASSPHRASE" not in opts["env_vars"]
    assert not (gpufleet_home / "pulumi-passphrase").exists()


# The Automation API passes --secrets-provider to `pulumi stack init` only (pulumi 3.272
# automation/_local_workspace.py create_stack; select_stack passes none); a stack's provider
# changes with `pulumi stack change-secrets-provider` (pkg/cmd/pulumi/stack/
# stack_change_secrets_provider.go), both read 2026-11-25.
def test_an_existing_stack_keeps_its_provider_and_up_says_how_to_change_it(env, gpufleet_home):
    env.setenv("PULUMI_CONFIG_PASSPHRASE", "old")
    env.setattr(Stack, "state_provider", {"type": "passphrase", "state": {"salt": "v1:x"}})
    calls, _ = run_up(env, spec(), "s3://team-state", "awskms://alias/team?region=us-east-1")
    said = next(line for line in calls[-1][1] if line.startswith("pulumi up:"))
    assert "secrets: the stack keeps its own (passphrase): --secrets-provider " in said
    assert (
        "to change it: pulumi stack change-secrets-provider --stack t "
        "'awskms://alias/team?region=us-east-1'" in said
    )


def test_an_empty_stack_made_before_keeps_its_provider_too(env, gpufleet_home):
    """A stack made with `pulumi stack init` has no state yet to read its provider from."""
    env.setenv("PULUMI_CONFIG_PASSPHRASE", "old")
    env.setattr(pp, "stack_resources", lambda name, backend: 0)  # there, empty
    chosen = secrets.choose("s3://team-state", "awskms://alias/team?region=us-east-1")
    said = secrets.describe(chosen, None, "t", created=False)
    assert said.startswith("the stack's own (it existed before this `up`): --secrets-provider")
    assert "pulumi stack change-secrets-provider --stack t" in said


def test_the_progress_line_names_the_kms_the_stack_uses(env, gpufleet_home):
    env.setattr(
        Stack,
        "state_provider",
        {"type": "cloud", "state": {"url": "awskms://alias/team?region=us-east-1"}},
    )
    calls, _ = run_up(env, spec(), "s3://team-state", "awskms://alias/team?region=us-east-1")
    said = next(line for line in calls[-1][1] if line.startswith("pulumi up:"))
    assert "secrets: secrets provider awskms://alias/team;" in said
    # asked for nothing on a bucket backend that the env cannot cover: refused (as before);
    # with a shared passphrase set, a KMS stack is named as the stack's own
    env.setenv("PULUMI_CONFIG_PASSPHRASE", "p")
    chosen = secrets.choose("file:///x")
    assert secrets.describe(chosen, "awskms://alias/team?region=us-east-1", "t") == (
        "the stack's own (awskms://alias/team)"
    )
