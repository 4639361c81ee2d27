"""Scoped: a value set while one component is declared, back to the default after."""

from __future__ import annotations

import pytest

from gpufleet.components.scoped import Scoped


def test_within_sets_the_value_nests_and_restores_even_on_an_error():
    s: Scoped[list[str]] = Scoped("test", list)
    assert s.get() == []
    with s.within(["outer"]):
        assert s.get() == ["outer"]
        with pytest.raises(RuntimeError), s.within(["inner"]):
            assert s.get() == ["inner"]
            raise RuntimeError("a refusal while declaring")
        assert s.get() == ["outer"]
    assert s.get() == []
    assert s.get() is not s.get(), "a fresh default each time: nothing shared between fleets"
