"""Azure: which input changes replace a VM or make ARM refuse the update (azure-native)."""

from __future__ import annotations

from gpufleet.components.replacements import ForceNew

# Sources (read 2026-11-25):
# - https://learn.microsoft.com/azure/virtual-machines/custom-data: custom data is set at
#   creation and cannot be updated on an existing VM ("Changing property 'customData' is not
#   allowed"); ../shared/reference/cloud-gpu-facts.md (Azure billing, 2026-11-25) too.
# - storageProfile.imageReference, osProfile.adminUsername/computerName and availabilitySet are
#   fixed at creation (an existing VM cannot be added to an availability set: learn.microsoft.com
#   /azure/virtual-machines/availability-set-overview). ARM answers a PUT that changes them with
#   409 PropertyChangeNotAllowed.
# - azure-native replaces a resource when a path parameter of its ARM URL changes
#   (resourceGroupName and the resource's own name parameter): pulumi-azure-native's
#   provider marks them replace-on-change.
# - learn.microsoft.com/azure/virtual-machines/trusted-launch-existing-vm: the security type
#   (securityProfile) of an existing VM changes only while it is deallocated.
# Pulumi replaces on an immutable change only when the resource lists it in
# replace_on_changes (pulumi.com/docs/iac/concepts/options/replaceonchanges/); else it sends the
# update and ARM refuses it.
TABLE = ForceNew(
    force_new={
        "azure-native:compute:VirtualMachine": ("resourceGroupName", "vmName"),
        "azure-native:network:NetworkInterface": ("resourceGroupName",),
        "azure-native:network:Subnet": ("resourceGroupName", "virtualNetworkName"),
        "azure-native:network:VirtualNetwork": ("resourceGroupName",),
        "azure-native:compute:AvailabilitySet": ("resourceGroupName",),
        "azure-native:compute:ProximityPlacementGroup": ("resourceGroupName",),
    },
    immutable={
        "azure-native:compute:VirtualMachine": (
            "osProfile.customData",
            "osProfile.adminUsername",
            "osProfile.computerName",
            "storageProfile.imageReference",
            "availabilitySet",
            "location",
            "securityProfile",
        ),
    },
    nodes=("azure-native:compute:VirtualMachine",),
    labels={
        "osProfile.customData": "custom data (the recipe and expiry)",
        "storageProfile.imageReference": "image reference",
        "securityProfile": "security type",
        "tags": "tags",
    },
)
