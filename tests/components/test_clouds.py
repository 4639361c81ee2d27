"""The cloud names: the Literal a spec accepts, the tuple the CLI offers, the Pulumi ones."""

from __future__ import annotations

from typing import get_args

from gpufleet.components.clouds import CLOUDS, PULUMI_CLOUDS, Cloud


def test_the_clouds_tuple_is_the_literal_and_holds_the_pulumi_clouds():
    assert get_args(Cloud) == CLOUDS
    assert set(PULUMI_CLOUDS) < set(CLOUDS)
    assert not set(PULUMI_CLOUDS) & {"local", "vm", "ssh"}
