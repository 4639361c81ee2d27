"""A stack's secrets provider: a cloud KMS on a shared bucket backend, else a passphrase."""

from __future__ import annotations

import os
from dataclasses import dataclass

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
    passphrase: PULUMI_CONFIG_PASSPHRASE is passed (the env's, or the local generated one)."""

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
            "or set PULUMI_CONFIG_PASSPHRASE to a passphrase you share",
        )


def is_bucket(backend: str) -> bool:
    return backend.startswith(tuple(BUCKET_KMS))


def choose(backend: str, explicit: str | None = None, *, strict: bool = True) -> SecretsChoice:
    """The secrets provider for stacks in `backend`.

    file:// keeps the passphrase (generated per machine unless PULUMI_CONFIG_PASSPHRASE is
    set). A bucket backend (s3://, gs://, azblob://) takes the KMS given by --secrets-provider
    or $GPUFLEET_SECRETS_PROVIDER; else $PULUMI_CONFIG_PASSPHRASE, a shared passphrase; else
    NoSharedSecrets when `strict` (creating a stack). Not strict (destroy, list), the stack
    keeps whatever provider its state names, and the local passphrase is offered as before.
    """
    given = explicit or os.environ.get(ENV) or None
    env_pass = "PULUMI_CONFIG_PASSPHRASE" in os.environ
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
        return SecretsChoice(
            "passphrase", True, "the shared PULUMI_CONFIG_PASSPHRASE (teammates need it too)"
        )
    if strict:
        raise NoSharedSecrets(backend, _example(backend))
    return SecretsChoice(None, True, "the stack's own secrets provider")


def _example(backend: str) -> str:
    return next((kms for prefix, kms in BUCKET_KMS.items() if backend.startswith(prefix)),
                BUCKET_KMS["s3://"])  # fmt: skip
