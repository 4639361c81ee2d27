"""Whether a region/zone offers an instance type: the answer, and who gave it (live or offline)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

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


def under_mocks() -> bool:
    """True in a program run under Pulumi's mocks (`gpufleet plan`, the tests): no cloud to ask."""
    from pulumi.runtime import settings
    from pulumi.runtime.mocks import MockMonitor

    return isinstance(settings.get_monitor(), MockMonitor)
