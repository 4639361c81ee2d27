"""Ed25519 key generation in OpenSSH formats (no ssh-keygen process needed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KeyPair:
    private_openssh: str
    public_openssh: str  # "ssh-ed25519 AAAA..."


def generate_ed25519(comment: str = "") -> KeyPair:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return KeyPair(private, f"{public} {comment}".strip())
