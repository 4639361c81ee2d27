"""customData for an Azure VM: gzipped cloud-init, base64, refused over ARM's 65535 bytes."""

from __future__ import annotations

import base64
import gzip

from gpufleet.components.errors import GpufleetError
from gpufleet.components.exitcodes import ExitCode

# OSProfile.customData: "The maximum length of the binary array is 65535 bytes": the decoded
# data; its base64 may be up to 87380 characters (ARM's error names that figure).
CUSTOM_DATA_MAX = 65535


class CustomDataTooLarge(GpufleetError):
    """The node's cloud-init is over Azure's customData limit even gzipped."""

    exit_code = ExitCode.USAGE


def encode_custom_data(text: str) -> str:
    """Gzip (cloud-init detects and unpacks it) then base64; mtime 0 keeps it stable, so a
    re-apply with the same text changes nothing."""
    packed = gzip.compress(text.encode(), mtime=0)
    if len(packed) > CUSTOM_DATA_MAX:
        raise CustomDataTooLarge(
            f"the node's customData is {len(packed)} bytes (gzipped cloud-init, "
            f"{len(text.encode())} bytes plain), over Azure's {CUSTOM_DATA_MAX}",
            hint="shorten the recipe or its extra files, or bake them into an image "
            "(`gpufleet image bake`)",
        )
    return base64.b64encode(packed).decode()
