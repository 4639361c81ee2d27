"""The VM's security type, pinned per size: Trusted Launch where the size takes it."""

from __future__ import annotations

from typing import Any

import pulumi_azure_native as az

# Size series Trusted Launch does not support yet (azure-compute-docs trusted-launch.md,
# "Virtual machines sizes", GPU row, "Currently not supported size families").
NO_TRUSTED_LAUNCH = ("ND96asr_v4", "ND96amsr_A100_v4")


def trusted_launch(size: str) -> bool:
    return not any(size.endswith(s) for s in NO_TRUSTED_LAUNCH)


def security_profile(size: str) -> Any:
    """TrustedLaunch with a vTPM and Secure Boot off where the size supports it (Secure Boot
    refuses the unsigned kernel module a DKMS-built NVIDIA driver is, and the recipe may build
    one); None where it does not: ARM's default, Standard (the SDK's API version has no
    "Standard" value to send)."""
    if not trusted_launch(size):
        return None
    return az.compute.SecurityProfileArgs(
        security_type="TrustedLaunch",
        uefi_settings=az.compute.UefiSettingsArgs(secure_boot_enabled=False, v_tpm_enabled=True),
    )
