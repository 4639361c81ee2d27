"""The one error root shared by components and the CLI; each subclass carries its data."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpufleet.components.exitcodes import ExitCode


class GpufleetError(Exception):
    """Base of every error gpufleet raises on purpose; the CLI turns it into a message and code.

    A subclass (or an instance) sets its ExitCode; a plain one is a step of gpufleet's own
    that failed (OPERATION_FAILED), never 1, which is a job's failure.
    """

    exit_code: int = ExitCode.OPERATION_FAILED

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


# The Python SDK modules of each cloud, and the extra (`pip install "gpufleet[aws]"`) that
# installs them; pulumi and pulumi_tls come with every cloud's extra.
SDK_EXTRAS = {"pulumi_aws": "aws", "pulumi_gcp": "gcp", "pulumi_azure_native": "azure"}
SHARED_SDKS = ("pulumi", "pulumi_tls")


class MissingExtra(GpufleetError):
    """A cloud's Python SDK is not installed: gpufleet was installed without that cloud's extra."""

    exit_code = ExitCode.USAGE

    def __init__(self, module: str, extra: str | None):
        package = module.split(".")[0]
        who = f"the {extra} cloud" if extra else "a cloud cluster"
        fix = (
            f'pip install "gpufleet[{extra}]"'
            if extra
            else ('pip install "gpufleet[aws]" (or [gcp], [azure]: the cloud you use)')
        )
        super().__init__(
            f"{who} needs the Python package {package!r}, which is not installed", hint=fix
        )
        self.module = package
        self.extra = extra


def missing_extra(e: ModuleNotFoundError, cloud: str | None = None) -> MissingExtra | None:
    """The MissingExtra a failed import of a cloud SDK means (`cloud`: the one in question,
    for the SDKs every cloud shares), or None for any other missing module (a defect)."""
    top = (e.name or "").split(".")[0]
    if top in SDK_EXTRAS:
        return MissingExtra(top, SDK_EXTRAS[top])
    if top in SHARED_SDKS:
        return MissingExtra(top, cloud if cloud in SDK_EXTRAS.values() else None)
    return None


@contextlib.contextmanager
def cloud_sdk(cloud: str | None) -> Iterator[None]:
    """Around code that imports a cloud's SDK: a missing SDK raises MissingExtra."""
    try:
        yield
    except ModuleNotFoundError as e:
        err = missing_extra(e, cloud)
        if err is None:
            raise
        raise err from None


class SpecError(GpufleetError):
    """A ClusterSpec field is wrong; names the field and how to fix it."""

    exit_code = ExitCode.USAGE

    def __init__(self, field: str, problem: str, fix: str):
        super().__init__(f"{field}: {problem}", hint=fix)
        self.field = field
        self.problem = problem
        self.fix = fix


class CatalogError(GpufleetError):
    """An instance type is not in the catalog."""

    exit_code = ExitCode.USAGE

    def __init__(self, instance_type: str, cloud: str, known: list[str]):
        sample = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "")
        super().__init__(
            f"instance_type: {instance_type!r} is not a known {cloud} GPU type",
            hint=f"pick one of: {sample} (see `gpufleet catalog --cloud {cloud}`)",
        )
        self.instance_type = instance_type
        self.cloud = cloud


class CatalogEntryError(CatalogError):
    """A catalog entry breaks a rule (a defect in catalog.yaml, not in user input).

    Names the entry and the field; `problem` reads as a sentence about that field.
    """

    exit_code = ExitCode.INTERNAL

    def __init__(self, cloud: str, name: str, problem: str, field: str = "entry"):
        # Not CatalogError.__init__: that message is about a type missing from the catalog.
        GpufleetError.__init__(
            self,
            f"catalog entry {cloud}/{name}: {problem}",
            hint=f"fix clouds.{cloud}.{name}.{field} in components/catalog.yaml",
        )
        self.cloud = cloud
        self.name = name
        self.instance_type = name
        self.field = field
        self.problem = problem
