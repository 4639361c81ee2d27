"""The clouds gpufleet provisions on, and which of them Pulumi stacks make."""

from __future__ import annotations

from typing import Literal

Cloud = Literal["local", "vm", "ssh", "aws", "gcp", "azure"]
CLOUDS: tuple[str, ...] = ("local", "vm", "ssh", "aws", "gcp", "azure")
PULUMI_CLOUDS: tuple[str, ...] = ("aws", "gcp", "azure")
