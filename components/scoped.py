"""A value set while one component is declared, for the lookups and checks it makes first."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Generic, TypeVar

T = TypeVar("T")


class Scoped(Generic[T]):
    """`with s.within(value):` makes `s.get()` answer `value`; outside, `default()`.

    A context variable, not an argument: the offer checks and validators share one signature
    across clouds, and what a fleet brings or which provider it asks is the fleet's own."""

    def __init__(self, name: str, default: Callable[[], T]) -> None:
        self._var: ContextVar[T | None] = ContextVar(f"gpufleet_{name}", default=None)
        self._default = default

    @contextlib.contextmanager
    def within(self, value: T) -> Iterator[None]:
        token = self._var.set(value)
        try:
            yield
        finally:
            self._var.reset(token)

    def get(self) -> T:
        value = self._var.get()
        return self._default() if value is None else value
