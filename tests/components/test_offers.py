"""Every cloud's pre-creation offer check has the one signature components/offers.py declares."""

from __future__ import annotations

import inspect

import pytest

from gpufleet.components.offers import CheckOffered
from gpufleet.components.registry import _FLEETS, _OFFERS, offer_check


def test_the_registry_holds_one_check_per_cloud_with_a_fleet():
    assert set(_OFFERS) == set(_FLEETS)


@pytest.mark.parametrize("cloud", sorted(_OFFERS))
def test_each_clouds_check_takes_the_declared_parameters_and_returns_offered(cloud):
    declared = inspect.signature(CheckOffered.__call__)
    check = inspect.signature(offer_check(cloud))
    assert list(check.parameters) == list(declared.parameters)[1:]  # less `self`
    assert check.return_annotation == declared.return_annotation == "Offered"
