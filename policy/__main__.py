"""gpufleet's CrossGuard policy pack: `pulumi up --policy-pack <this folder>`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpufleet_pack, gpufleet_policy

from gpufleet_pack import policies  # noqa: E402
from pulumi_policy import EnforcementLevel, PolicyPack  # noqa: E402

PolicyPack(
    name="gpufleet",
    enforcement_level=EnforcementLevel.MANDATORY,
    policies=policies(),
)
