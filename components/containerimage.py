"""A container image reference as `--image` takes it: a registry reference or an archive."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.components.errors import SpecError

# containers-transports(5) names gpufleet takes: a registry (the default), or an archive file on
# the machine running gpufleet, copied to every node and loaded there (air-gapped clusters).
REGISTRY = "docker"
ARCHIVES = ("oci-archive", "docker-archive")
TRANSPORTS = (REGISTRY, *ARCHIVES)
DEFAULT_REGISTRY = "docker.io"  # a reference without a host: Docker Hub, as docker and podman
# The distribution spec's grammar, simplified: [host[:port]/]path[:tag][@sha256:hex].
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?)"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REF = re.compile(
    rf"^(?:(?P<host>{_HOST})/)?(?P<path>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
# Which registry family a host is: its credentials come from the node's own identity.
_KINDS = (
    ("ngc", re.compile(r"^nvcr\.io$")),
    ("ecr", re.compile(r"^\d{12}\.dkr\.ecr(?:-fips)?\.[a-z0-9-]+\.amazonaws\.com(?:\.cn)?$")),
    ("gar", re.compile(r"^(?:[a-z0-9-]+-docker\.pkg\.dev|(?:[a-z]+\.)?gcr\.io)$")),
    ("acr", re.compile(r"^[a-z0-9]{5,50}\.azurecr\.io$")),
)


@dataclass(frozen=True)
class ImageRef:
    """A parsed `--image`: transport, and the reference (registry) or the archive's path."""

    transport: str  # docker | oci-archive | docker-archive
    reference: str = ""  # registry: host/path[:tag][@digest], the host made explicit
    path: str = ""  # an archive: its path on the machine running gpufleet

    @property
    def is_archive(self) -> bool:
        return self.transport in ARCHIVES

    @property
    def host(self) -> str:
        """The registry host ('' for an archive)."""
        return self.reference.split("/", 1)[0] if self.reference else ""

    @property
    def registry_kind(self) -> str:
        """ngc | ecr | gar | acr | other ('' for an archive): how the node gets credentials."""
        if self.is_archive:
            return ""
        return next((k for k, rx in _KINDS if rx.match(self.host)), "other")

    def __str__(self) -> str:
        return f"{self.transport}:{self.path}" if self.is_archive else self.reference


def parse(text: str, field: str = "container.image") -> ImageRef:
    """`--image` text -> ImageRef; a SpecError naming `field` for anything else."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(field, "is empty", "give an image, e.g. nvcr.io/nvidia/pytorch:25.01-py3")
    text = text.strip()
    for transport in ARCHIVES:
        if text.startswith(transport + ":"):
            path = text[len(transport) + 1 :]
            if not path:
                raise SpecError(
                    field, f"{text!r} names no file", f"give {transport}:PATH to the archive"
                )
            return ImageRef(transport, path=path)
    ref = text.removeprefix("docker://")
    m = _REF.match(ref)
    if m is None:
        raise SpecError(
            field,
            f"{text!r} is not an image reference",
            "give [registry/]repository[:tag][@sha256:...], or oci-archive:PATH / "
            "docker-archive:PATH for an archive file",
        )
    host = m.group("host")
    # As docker reads it: the first part is a host only with a '.', a ':' or 'localhost'.
    if host is None or not ("." in host or ":" in host or host == "localhost"):
        if host is not None and not re.fullmatch(_COMPONENT, host):  # e.g. UPPER/case
            raise SpecError(
                field,
                f"{text!r}: {host!r} is neither a registry host nor a lowercase repository name",
                "repository names are lowercase; a registry host has a '.' or a ':port'",
            )
        path = ref
        if "/" not in path.split(":")[0].split("@")[0]:
            path = "library/" + path
        ref = f"{DEFAULT_REGISTRY}/{path}"
    return ImageRef(REGISTRY, reference=ref)
