"""Whether a region/zone offers an instance type: the answer, and who gave it (live or offline)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from gpufleet.components.clusterspec import ClusterSpec

Status = Literal["live", "offline", "not-checked"]


@dataclass(frozen=True)
class Availability:
    """What a fleet's pre-creation check of its region/zone found, and how far to trust it.

    live: the cloud's own API answered. offline: a stand-in answered (a plan under mocks);
    not-checked: nothing could answer without credentials, and `up` asks the cloud.
    """

    status: Status
    where: str  # the region, and the zone(s) when known
    source: str  # who answered: an API name, or the offline stand-in

    def line(self) -> str:
        if self.status == "live":
            return f"{self.where}: offered (asked {self.source})"
        if self.status == "offline":
            return (
                f"{self.where}: offered per {self.source}, offline, not the cloud; "
                "`up` asks the cloud before creating anything"
            )
        return f"{self.where}: not checked ({self.source})"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Offered:
    """A passed check: how far to trust it, and the zone the fleet goes in where the check
    picked it (AWS: the first zone offering the type); None where the cloud places it."""

    availability: Availability
    zone: str | None = None


class CheckOffered(Protocol):
    """Each cloud's pre-creation check (components/registry.py holds them), run by its GpuFleet
    or ImageBake before anything is registered, on `pulumi preview` and `up` alike."""

    def __call__(self, spec: ClusterSpec, instance_type: str) -> Offered:
        """Whether the spec's region, and each zone it names, offers `instance_type` (a catalog
        name) to these credentials. Raises SpecError (field region or zone, with the fix) when
        not; GpufleetError when the cloud could not be asked. Under mocks, answers offline."""
        ...


def under_mocks() -> bool:
    """True in a program run under Pulumi's mocks (`gpufleet plan`, the tests): no cloud to ask."""
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(settings.get_monitor(), MockMonitor)
