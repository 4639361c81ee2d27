"""The scale benchmark's projection: a least-squares line in N, read at a larger N."""

from __future__ import annotations

import pytest

from benchmarks._fit import fit_line, project


def test_a_line_through_two_points_is_exact():
    a, b = fit_line([64, 256], [1.0, 4.0])
    assert b == pytest.approx(3 / 192)
    assert a + b * 64 == pytest.approx(1.0)


def test_least_squares_over_three_points():
    # y = 1 + 2x with the middle point 0.3 high: the slope stays 2, the intercept moves by 0.1
    a, b = fit_line([0, 1, 2], [1.0, 3.3, 5.0])
    assert (a, b) == (pytest.approx(1.1), pytest.approx(2.0))


def test_one_distinct_n_is_no_line():
    with pytest.raises(ValueError):
        fit_line([64, 64], [1.0, 2.0])


def test_project_reads_wall_and_cpu_lines_at_n_and_skips_single_points():
    points = {"exec": {64: (1.0, 0.5), 256: (4.0, 2.0)}, "down": {64: (3.0, 1.0)}}
    (p,) = project(points, 1000)
    assert p["op"] == "exec" and p["ns"] == [64, 256]
    assert p["wall_at"] == pytest.approx(1.0 + 3 / 192 * (1000 - 64))
    assert p["cpu_per_node"] == pytest.approx(1.5 / 192)
