#!/usr/bin/env bash
# NVIDIA datacenter driver of the pinned version, from the CUDA network repo (facts §4.1).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
want="${GPUFLEET_DRIVER_VERSION:?missing from the version set}"
have="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true)"
[ "$have" = "$want" ] && satisfied "driver $have loaded"
[ -n "$have" ] && log "driver $have loaded, $want pinned: installing $want"
curl -fsSLo /tmp/cuda-keyring.deb \
  https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/cuda-keyring_1.1-1_all.deb
dpkg -i /tmp/cuda-keyring.deb
apt-get update -q
apt_install "nvidia-driver-pinning-$want"
# Volta (V100) needs the proprietary modules; Turing and newer take the open ones.
if lspci -nn 2>/dev/null | grep -qi "V100"; then
  apt_install cuda-drivers
else
  apt_install nvidia-open
fi
rm -f "$R/etc/modprobe.d/nvidia-graphics-drivers-kms.conf"
log "driver $want installed; it loads after the reboot cloud-init schedules"
touch "$R/var/lib/gpufleet/reboot-required"
