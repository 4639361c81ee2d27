#!/usr/bin/env bash
# NVIDIA datacenter driver on the pinned branch, from the CUDA network repo (facts §4.1).
# A driver already loaded on the pinned branch is kept (GPUFLEET_STRICT_VERSIONS=1: only the
# exact pinned version). A new driver loads after the reboot the runner then does; if the node
# comes back without it, the step fails instead of rebooting again.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
want="${GPUFLEET_DRIVER_VERSION:?missing from the version set}"
branch="${GPUFLEET_DRIVER_BRANCH:?missing from the version set}"
have="$(loaded_driver)"
installed="$STATE/driver-installed"  # holds the boot id of the boot that installed $want
boot="$(cat "$R/proc/sys/kernel/random/boot_id" 2>/dev/null || echo unknown)"

if [ "$have" = "$want" ] || { [ -n "$have" ] && ! strict && [ "${have%%.*}" = "$branch" ]; }; then
  rm -f "$installed"
  satisfied "driver $have loaded (pinned $want, branch $branch)"
fi
if [ -f "$installed" ]; then
  if [ "$(cat "$installed")" = "$boot" ]; then
    mkdir -p "$STATE" && touch "$STATE/reboot-required"
    log "driver $want installed in this boot; it loads after the reboot"
    exit 0
  fi
  fail "driver $want was installed and the node rebooted, but the loaded driver is" \
    "'${have:-none}': see 'dmesg | grep -i nvidia' (Secure Boot, kernel headers, DKMS build)"
fi
log "loaded driver: ${have:-none}; installing $want"
cuda_repo
apt_install "nvidia-driver-pinning-$want"
# Volta (V100) needs the proprietary modules; Turing and newer take the open ones.
if lspci -nn 2>/dev/null | grep -qi "V100"; then
  apt_install cuda-drivers
else
  apt_install nvidia-open
fi
rm -f "$R/etc/modprobe.d/nvidia-graphics-drivers-kms.conf"
mkdir -p "$STATE"
printf '%s\n' "$boot" >"$installed"
touch "$STATE/reboot-required"
log "driver $want installed; it loads after the reboot"
