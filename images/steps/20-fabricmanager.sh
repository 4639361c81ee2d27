#!/usr/bin/env bash
# Fabric Manager at exactly the loaded driver's version, and the persistence daemon (facts §4.3,
# §4.4). NVSwitch types only need Fabric Manager; a version mismatch fails CUDA with error 802.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
if [ "${GPUFLEET_NVSWITCH:-0}" != 1 ]; then
  persist="$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null | sort -u || true)"
  [ "$persist" = "Enabled" ] && satisfied "no NVSwitch; persistence mode on"
  enable_unit nvidia-persistenced
  log "no NVSwitch; persistence daemon enabled"
  exit 0
fi
# The driver Fabric Manager must match: the one loaded, or the one that loads after the reboot.
if reboot_pending; then
  want="${GPUFLEET_DRIVER_VERSION:?missing from the version set}"
else
  want="$(loaded_driver)"
  want="${want:-${GPUFLEET_FABRIC_MANAGER:?missing from the version set}}"
fi
have="$(nv-fabricmanager --version 2>/dev/null | grep -o '[0-9][0-9.]*[0-9]' | head -n1 || true)"
if [ "$have" = "$want" ] && [ "$(systemctl is-active nvidia-fabricmanager || true)" = active ]; then
  satisfied "Fabric Manager $have active, same as the driver"
fi
major="${want%%.*}"
if [ "$major" -ge 580 ]; then pkg=nvidia-fabricmanager; else pkg="nvidia-fabricmanager-$major"; fi
log "installing $pkg=$want (had: ${have:-none})"
cuda_repo
apt_install --allow-downgrades "$pkg=$want-1"
enable_unit nvidia-fabricmanager nvidia-persistenced
