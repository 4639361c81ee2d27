"""The one error root shared by components and the CLI; each subclass carries its data."""

from __future__ import annotations


class GpufleetError(Exception):
    """Base of every error gpufleet raises on purpose; the CLI turns it into a message and code."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class SpecError(GpufleetError):
    """A ClusterSpec field is wrong; names the field and how to fix it."""

    exit_code = 2

    def __init__(self, field: str, problem: str, fix: str):
        super().__init__(f"{field}: {problem}", hint=fix)
        self.field = field
        self.problem = problem
        self.fix = fix


class CatalogError(GpufleetError):
    """An instance type is not in the catalog."""

    exit_code = 2

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

    exit_code = 1

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
