"""--image, --runtime, --mount: a checked ContainerSpec, where it runs, before anything exists."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpufleet.components.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.components.containerimage import ImageRef

RUNTIMES = ("auto", "docker", "podman")  # ContainerSpec.runtime's values
# ContainerSpec's field names -> the flags that set them, so an error names what the user typed
_FLAGS = {
    "container.mounts": "--mount",
    "container.runtime": "--runtime",
    "container.registry_id": "--registry-id",
}


def spec(
    image: str | None,
    runtime: str | None,
    mounts: list[str],
    *,
    flag: str = "--image",
    registry_id: str | None = None,
) -> ContainerSpec | None:
    """The ContainerSpec the flags ask for (None without `flag`); a SpecError naming the flag.

    An archive's path is made absolute and must be a file here: it is copied from this machine.
    """
    from gpufleet.components.clusterspec import ContainerSpec
    from gpufleet.components.containerimage import parse

    if image is None:
        extra = (
            "--runtime"
            if runtime is not None
            else "--mount"
            if mounts
            else "--registry-id"
            if registry_id
            else None
        )
        if extra:
            raise SpecError(extra, f"applies to {flag} only", f"add {flag} IMAGE, or drop {extra}")
        return None
    ref = parse(image, flag)
    if ref.is_archive:
        ref = check_archive(ref, flag)
    if runtime is not None and runtime not in RUNTIMES:
        raise SpecError(
            "--runtime",
            f"{runtime!r} is not one of {', '.join(RUNTIMES)}",
            "use auto, docker or podman",
        )
    try:
        return ContainerSpec(
            image=str(ref),
            runtime=runtime or "auto",
            mounts=list(mounts),
            registry_id=registry_id,
        )
    except SpecError as e:
        raise SpecError(_FLAGS.get(e.field, flag), e.problem, e.fix) from None


def check_archive(ref: ImageRef, flag: str = "--image") -> ImageRef:
    """An archive image whose file is readable here (the pull's own check), its path made
    absolute."""
    from gpufleet.components.containerimage import ImageRef
    from gpufleet.jobs.pull import check_archive as readable

    path, _size = readable(ref, flag)
    return ImageRef(ref.transport, path=str(path))


def pull_where(container: ContainerSpec, cloud: str, *, creating: bool) -> str:
    """Where and when the image reaches the nodes, as --dry-run says it."""
    from gpufleet.components.containerimage import parse
    from gpufleet.provision import traits

    p = traits(cloud)
    if parse(container.image).is_archive:
        return "archive copied to the head, from it to every node, loaded there"
    if p.containers == "host":
        return "pulled on this machine before the job"
    if creating and not p.own_hosts:
        return "pulled by every node at boot (cloud-init), alongside the driver install"
    return "pulled by every node in parallel before the job"


def shown(container: ContainerSpec | None, cloud: str, *, creating: bool) -> dict[str, str]:
    """--dry-run's image lines (and dry-run.schema.json's fields): image, runtime, pull."""
    if container is None:
        return {}
    return {
        "image": container.image,
        "runtime": container.runtime,
        "pull": pull_where(container, cloud, creating=creating),
    }
