"""The one pinned OpenSSH client option set, rendered as -o args, config lines or into RSH."""

from __future__ import annotations

# AES-GCM first: with AES-NI / ARMv8 crypto it moves bulk data faster than OpenSSH's
# default first choice, chacha20-poly1305 (~1.8x on this project's build machine).
CIPHERS = "aes128-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr"


def pinned(known_hosts: str, host_key_type: str | None) -> list[tuple[str, str]]:
    """The cluster key only, the pinned host key only (no trust on first use), never a prompt.

    host_key_type None: left out (the head's RSH names it per worker).
    """
    return [
        ("IdentitiesOnly", "yes"),
        ("IdentityAgent", "none"),
        ("UserKnownHostsFile", known_hosts),
        ("GlobalKnownHostsFile", "/dev/null"),
        ("StrictHostKeyChecking", "yes"),
        ("UpdateHostKeys", "no"),
        *([] if host_key_type is None else [("HostKeyAlgorithms", host_key_type)]),
        ("BatchMode", "yes"),
    ]


# For gpufleet's own connections (sync, tree exec): give up on a dead node, bulk-fast cipher.
TRANSPORT = [("ConnectTimeout", "20"), ("Ciphers", CIPHERS)]


def as_args(options: list[tuple[str, str]]) -> list[str]:
    return [a for k, v in options for a in ("-o", f"{k}={v}")]


def as_config(options: list[tuple[str, str]], indent: str = "    ") -> list[str]:
    return [f"{indent}{k} {v}" for k, v in options]
