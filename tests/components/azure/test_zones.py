"""Azure: a zone is refused, because the availability set that holds the nodes takes none."""

from __future__ import annotations

import pytest

from gpufleet.components import stackconfig
from gpufleet.components.clusterspec import ClusterSpec
from gpufleet.components.errors import SpecError

# azure-docs articles/virtual-machine-scale-sets/virtual-machine-scale-sets-orchestration-modes.md,
# "Comparing Flexible, Uniform, and Availability Sets" and its FAQ table (read 2026-11-25):
# feature -> what an availability set ("AvSets") supports.
AVSET_SUPPORTS = {
    "Availability Zones": "Not supported",
    "Deploy across availability zones": "No",
    "Infiniband": "Yes",
}


def _spec(**over):
    config = stackconfig.stack_config("azure-nd-a100")
    data = stackconfig.spec_from_config(config, stack="azure-nd-a100").model_dump()
    return ClusterSpec.from_input({**data, "zone": None, "zones": [], **over})


@pytest.mark.parametrize(("over", "field"), [({"zones": ["1", "2", "3"]}, "zones"),
                                             ({"zone": "2"}, "zone")])  # fmt: skip
def test_a_zone_is_refused_naming_the_field_and_the_fix(over, field):
    """InfiniBand needs the nodes in one availability set, and an availability set supports no
    availability zones (table above): a zone would be ignored, and each zone "fallback" would
    re-create the whole regional deployment."""
    with pytest.raises(SpecError) as e:
        _spec(**over)
    assert e.value.field == field
    assert "availability set" in e.value.problem and "zones" in e.value.problem
    assert e.value.fix.startswith(f"drop {field}")


def test_without_a_zone_the_spec_is_accepted():
    assert _spec().zone is None
