"""A stack's secrets provider: a cloud KMS on a shared bucket backend, else a passphrase."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from gpufleet.components.exitcodes import ExitCode
from gpufleet.core.errors import GpufleetError

ENV = "GPUFLEET_SECRETS_PROVIDER"
FLAG = "--secrets-provider"

# Pulumi's DIY (object storage) backends and the KMS that goes with each (`pulumi stack init
# --secrets-provider`, pulumi.com/docs/iac/cli/commands/pulumi_stack_init, read 2026-11-25).
BUCKET_KMS = {
    "s3://": "awskms://alias/gpufleet?region=us-east-1",
    "gs://": "gcpkms://projects/PROJECT/locations/global/keyRings/gpufleet/cryptoKeys/state",
    "azblob://": "azurekeyvault://VAULT.vault.azure.net/keys/gpufleet",
}
PROVIDER_SCHEMES = ("awskms://", "gcpkms://", "azurekeyvault://", "hashivault://")


@dataclass(frozen=True)
class SecretsChoice:
    """provider: what `pulumi stack init --secrets-provider` gets (None: the backend's default).
    passphrase: a passphrase is passed (PULUMI_CONFIG_PASSPHRASE[_FILE] from the environment,
    or the local generated one)."""

    provider: str | None
    passphrase: bool
    why: str


class NoSharedSecrets(GpufleetError):
    """A shared bucket backend with nothing a teammate could decrypt the stack's secrets with."""

    exit_code = ExitCode.USAGE

    def __init__(self, backend: str, example: str):
        super().__init__(
            f"the backend {backend} is shared, but this machine's generated passphrase would "
            "encrypt the stack's secrets (its SSH key): a teammate could not decrypt them",
            hint=f"pass {FLAG} {example!r} (or set {ENV}), a KMS key your team can use; "
            "or set PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) to a "
            "passphrase you share",
        )


def passphrase_file() -> str | None:
    """$PULUMI_CONFIG_PASSPHRASE_FILE: Pulumi reads the passphrase from that file when
    PULUMI_CONFIG_PASSPHRASE is unset (pkg/secrets/passphrase/manager.go readPassphrase)."""
    return os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE") or None


def shared_passphrase() -> str | None:
    """Which environment variable gives a passphrase teammates can share, if one does."""
    if "PULUMI_CONFIG_PASSPHRASE" in os.environ:
        return "PULUMI_CONFIG_PASSPHRASE"
    return "PULUMI_CONFIG_PASSPHRASE_FILE" if passphrase_file() else None


def is_bucket(backend: str) -> bool:
    return backend.startswith(tuple(BUCKET_KMS))


def choose(backend: str, explicit: str | None = None, *, strict: bool = True) -> SecretsChoice:
    """The secrets provider for stacks in `backend`.

    file:// keeps the passphrase (generated per machine unless PULUMI_CONFIG_PASSPHRASE is
    set, or PULUMI_CONFIG_PASSPHRASE_FILE). A bucket backend (s3://, gs://, azblob://) takes the
    KMS given by --secrets-provider or $GPUFLEET_SECRETS_PROVIDER; else a shared passphrase
    ($PULUMI_CONFIG_PASSPHRASE or $PULUMI_CONFIG_PASSPHRASE_FILE); else
    NoSharedSecrets when `strict` (creating a stack). Not strict (destroy, list), the stack
    keeps whatever provider its state names, and the local passphrase is offered as before.
    """
    given = explicit or os.environ.get(ENV) or None
    env_var = shared_passphrase()
    env_pass = env_var is not None
    if given:
        if given == "passphrase":
            if strict and is_bucket(backend) and not env_pass:
                raise NoSharedSecrets(backend, _example(backend))
            return SecretsChoice("passphrase", True, "passphrase, as asked")
        if not given.startswith(PROVIDER_SCHEMES) and given != "default":
            raise GpufleetError(
                f"{FLAG} {given!r} is not a Pulumi secrets provider",
                hint=f"one of {', '.join(PROVIDER_SCHEMES)}..., e.g. {_example(backend)!r}",
                exit_code=ExitCode.USAGE,
            )
        return SecretsChoice(given, env_pass, f"secrets provider {given.split('?')[0]}")
    if not is_bucket(backend):
        local = backend.startswith("file://") or "://" not in backend
        why = "passphrase (local backend)" if local else "the backend's own secrets provider"
        return SecretsChoice(None, True, why)
    if env_pass:
        return SecretsChoice("passphrase", True, f"the shared {env_var} (teammates need it too)")
    if strict:
        raise NoSharedSecrets(backend, _example(backend))
    return SecretsChoice(None, True, "the stack's own secrets provider")


def _example(backend: str) -> str:
    return next((kms for prefix, kms in BUCKET_KMS.items() if backend.startswith(prefix)),
                BUCKET_KMS["s3://"])  # fmt: skip


def stack_provider(stack: Any) -> str | None:
    """The secrets provider the stack's state names ("passphrase", "service", or the KMS URL of
    a "cloud" one), or None where the state names none yet (a stack just made by
    `pulumi stack init`: it has the provider it was made with)."""
    try:
        deployment = stack.export_stack().deployment or {}
    except Exception:  # noqa: BLE001 (best effort: the progress line then says what was asked)
        return None
    found = deployment.get("secrets_providers") or {}
    kind = found.get("type")
    if kind == "cloud":
        return (found.get("state") or {}).get("url") or "cloud"
    return kind or None


def _same(asked: str, used: str) -> bool:
    if asked == "default":
        return used == "service"
    return asked.split("?", 1)[0] == used.split("?", 1)[0]


def describe(chosen: SecretsChoice, used: str | None, stack: str, created: bool = True) -> str:
    """What the `up` progress line says about secrets: what the stack actually uses. The
    Automation API passes --secrets-provider only to `pulumi stack init` (pulumi's
    automation/_local_workspace.py create_stack), so an existing stack keeps its own: said,
    with the command that changes it. `used`: stack_provider's answer; `created`: whether
    this `up` made the stack."""
    fix = f"to change it: pulumi stack change-secrets-provider --stack {stack} {chosen.provider!r}"
    if used is None:
        if created or not chosen.provider:
            return chosen.why
        return (
            f"the stack's own (it existed before this `up`): {FLAG} applies only to a new "
            f"stack; {fix}"
        )
    shown = used.split("?", 1)[0]
    if chosen.provider is None:
        local = used == "passphrase" and chosen.passphrase
        return chosen.why if local else f"the stack's own ({shown})"
    if _same(chosen.provider, used):
        return chosen.why
    return (
        f"the stack keeps its own ({shown}): {FLAG} {chosen.provider!r} applies only to a new "
        f"stack; {fix}"
    )
