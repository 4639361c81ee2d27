"""customData for an Azure VM: gzipped cloud-init, base64, refused over ARM's 64 KB limit."""

from __future__ import annotations

import base64
import gzip

from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode

# OSProfile.customData: "The maximum length of the binary array is 65535 bytes", sent base64.
CUSTOM_DATA_MAX = 65535


class CustomDataTooLarge(GpufleetError):
    """The node's cloud-init is over Azure's customData limit even gzipped."""

    exit_code = ExitCode.USAGE


def encode_custom_data(text: str) -> str:
    """Gzip (cloud-init detects and unpacks it) then base64; mtime 0 keeps it stable, so a
    re-apply with the same text changes nothing."""
    encoded = base64.b64encode(gzip.compress(text.encode(), mtime=0)).decode()
    if len(encoded) > CUSTOM_DATA_MAX:
        raise CustomDataTooLarge(
            f"the node's customData is {len(encoded)} bytes (base64 of gzipped cloud-init, "
            f"{len(text.encode())} bytes plain), over Azure's {CUSTOM_DATA_MAX}",
            hint="shorten the recipe or its extra files, or bake them into an image "
            "(`gpufleet image bake`)",
        )
    return encoded
