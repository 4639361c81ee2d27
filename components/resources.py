"""Where gpufleet's data folders are: a wheel's shipped copies, else the checkout's own."""

from __future__ import annotations

from pathlib import Path

# A wheel carries images/, scripts/ and stacks/ under components/_shipped/ (pyproject's
# package-dir); a checkout (or an editable install) reads the top-level folders themselves.
SHIPPED = Path(__file__).resolve().parent / "_shipped"
CHECKOUT = Path(__file__).resolve().parent.parent


def data_dir(name: str) -> Path:
    """The folder `name` (images, scripts, stacks) this installation reads."""
    shipped = SHIPPED / name
    return shipped if shipped.is_dir() else CHECKOUT / name
