"""Fixtures: the node-side scripts loaded as modules."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.scripts import load_script


@pytest.fixture(scope="session")
def hc() -> ModuleType:
    """scripts/health_check.py."""
    return load_script("health_check")


@pytest.fixture(scope="session")
def probe() -> ModuleType:
    """scripts/allreduce_probe.py."""
    return load_script("allreduce_probe")
