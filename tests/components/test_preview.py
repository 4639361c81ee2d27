"""preview.fewer_collections: the program's GC thresholds, and the caller's back afterwards."""

import gc

import pytest

from gpufleet.components.preview import PROGRAM_GC_THRESHOLD, fewer_collections


def test_fewer_collections_sets_and_restores_the_thresholds() -> None:
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold() == PROGRAM_GC_THRESHOLD
    assert gc.get_threshold() == before


def test_fewer_collections_restores_the_thresholds_when_the_program_raises() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("refused")
    assert gc.get_threshold() == before
