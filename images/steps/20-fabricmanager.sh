#!/usr/bin/env bash
# Fabric Manager (same version as the driver) and the persistence daemon (facts §4.3, §4.4).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
if [ "${GPUFLEET_NVSWITCH:-0}" != 1 ]; then
  persist="$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null | sort -u || true)"
  [ "$persist" = "Enabled" ] && satisfied "no NVSwitch; persistence mode on"
  systemctl enable --now nvidia-persistenced
  exit 0
fi
want="${GPUFLEET_FABRIC_MANAGER:?missing from the version set}"
have="$(nv-fabricmanager --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -n1 || true)"
if [ "$have" = "$want" ] && [ "$(systemctl is-active nvidia-fabricmanager || true)" = active ]; then
  satisfied "Fabric Manager $have active"
fi
major="${want%%.*}"
if [ "$major" -ge 580 ]; then pkg=nvidia-fabricmanager; else pkg="nvidia-fabricmanager-$major"; fi
log "installing $pkg=$want (had: ${have:-none})"
apt_install "$pkg=$want-1"
systemctl enable --now nvidia-fabricmanager nvidia-persistenced
