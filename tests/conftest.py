"""Shared fixtures: an isolated state dir, and golden files for rendered text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def gpufleet_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own $GPUFLEET_HOME, so no test sees another's clusters."""
    home = tmp_path_factory.mktemp("gpufleet-home")
    monkeypatch.setenv("GPUFLEET_HOME", str(home))
    return home


@pytest.fixture
def golden():
    """golden(name, text): compare with tests/golden/<name>; GPUFLEET_UPDATE_GOLDEN=1 rewrites.

    Regenerate after an intended change with `make golden`, then review the diff.
    """

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if os.environ.get("GPUFLEET_UPDATE_GOLDEN") == "1":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"missing golden file {path}; create it with `make golden`"
        assert text == path.read_text(), f"{name} differs from its golden file (`make golden`)"

    return check
