"""The scale projection: a least-squares line through (N, median) points, read at a larger N."""

from __future__ import annotations

from collections.abc import Sequence


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(a, b) of y = a + b*x by ordinary least squares; at least two distinct x are needed."""
    if len(xs) != len(ys) or len(set(xs)) < 2:
        raise ValueError(f"a line needs two or more distinct x, got {list(xs)}")
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )
    return my - b * mx, b


def project(points: dict[str, dict[int, tuple[float, float]]], at: int) -> list[dict]:
    """Per operation, the wall and CPU lines through its (N -> (wall s, cpu s)) medians, and
    their values at N = `at`: fixed seconds (a), seconds per node (b), projected seconds.
    Operations measured at fewer than two N are left out."""
    out = []
    for op, by_n in points.items():
        if len(by_n) < 2:
            continue
        ns = sorted(by_n)
        wa, wb = fit_line(ns, [by_n[n][0] for n in ns])
        ca, cb = fit_line(ns, [by_n[n][1] for n in ns])
        out.append(
            {
                "op": op,
                "ns": ns,
                "wall_fixed": wa,
                "wall_per_node": wb,
                "wall_at": wa + wb * at,
                "cpu_fixed": ca,
                "cpu_per_node": cb,
                "cpu_at": ca + cb * at,
                "at": at,
            }
        )
    return out
