#!/usr/bin/env bash
# Shared by every step: the root prefix (tests point it at a temp dir), the node's settings
# from /etc/gpufleet/env, the two ways a step ends early, and the install helpers.
set -euo pipefail

R="${GPUFLEET_ROOT:-}"
ENV_FILE="$R/etc/gpufleet/env"
if [ -f "$ENV_FILE" ]; then
  set -a
  # shellcheck source=/dev/null
  . "$ENV_FILE"
  set +a
fi
STEP="$(basename "$0" .sh)"
STATE="$R/var/lib/gpufleet"
WORK="$R/var/tmp/gpufleet"  # downloads
# The EFA installer puts its tools in /opt/amazon/efa/bin, which is not on a systemd service's
# PATH (the recipe runs as one): call them by absolute path.
# shellcheck disable=SC2034  # used by the steps that source this file
EFA_BIN="$R/opt/amazon/efa/bin"

# Nothing to do: the result is already there (a baked or vendor image passes in seconds).
satisfied() {
  echo "$STEP: already satisfied: $*"
  exit 0
}

# Not applicable to this node (no GPUs, no NVSwitch, no fabric).
skip() {
  echo "$STEP: skipped: $*"
  exit 0
}

log() {
  echo "$STEP: $*"
}

fail() {
  echo "$STEP: $*" >&2
  exit 1
}

gpus_expected() {
  [ "${GPUFLEET_GPUS:-0}" -gt 0 ]
}

# Exact pinned versions demanded (otherwise a vendor image's same-branch versions are kept).
strict() {
  [ "${GPUFLEET_STRICT_VERSIONS:-0}" = 1 ]
}

# A new driver was installed in this boot; it loads only after the reboot the runner does.
reboot_pending() {
  [ -e "$STATE/reboot-required" ]
}

# The loaded NVIDIA driver's version, empty when none is loaded.
loaded_driver() {
  nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true
}

# The newest NCCL library on the usual paths, as 2.31.2; empty when there is none.
nccl_version() {
  local lib v have=""
  for lib in "$R"/usr/lib/x86_64-linux-gnu/libnccl.so.2.* "$R"/usr/local/cuda*/lib*/libnccl.so.2.*; do
    [ -e "$lib" ] || continue
    v="${lib##*/libnccl.so.}"
    if [ -z "$have" ] || [ "$(printf '%s\n%s\n' "$have" "$v" | sort -V | tail -n1)" = "$v" ]; then
      have="$v"
    fi
  done
  echo "$have"
}

# Enable a unit, and start it unless a reboot is pending (its driver is not loaded yet).
enable_unit() {
  if reboot_pending; then systemctl enable "$@"; else systemctl enable --now "$@"; fi
}

# Every apt call waits for the dpkg lock instead of failing: on a first boot
# unattended-upgrades may hold it for minutes. `update` takes the lists lock, which apt does
# not wait for, so it is retried.
APT_LOCK_WAIT=600
apt_get() {
  local try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    DEBIAN_FRONTEND=noninteractive apt-get "$@" -o "DPkg::Lock::Timeout=$APT_LOCK_WAIT" && return 0
    [ "$1" = update ] || return 1
    log "apt-get update failed (try $try; another apt may hold the lock), retrying"
    sleep "${GPUFLEET_APT_RETRY_SLEEP:-30}"
  done
  return 1
}

apt_install() {
  apt_get install -y -q "$@"
}

# The apt version of package $1 that starts with $2 (an epoch before it is allowed).
apt_candidate() {
  apt-cache madison "$1" 2>/dev/null \
    | awk -v want="$2" '{v = $3; sub(/^[0-9]+:/, "", v); if (index(v, want) == 1) {print $3; exit}}'
}

# NVIDIA's CUDA network repository: the driver, Fabric Manager, NCCL and DCGM come from it.
cuda_repo() {
  dpkg-query -W -f='${Status}' cuda-keyring 2>/dev/null | grep -q "install ok installed" && return 0
  local distro=ubuntu2204
  if [ -f "$R/etc/os-release" ]; then
    # shellcheck source=/dev/null
    distro="$(. "$R/etc/os-release" && echo "ubuntu${VERSION_ID//./}")"
  fi
  mkdir -p "$WORK"
  curl -fsSLo "$WORK/cuda-keyring.deb" \
    "https://developer.download.nvidia.com/compute/cuda/repos/$distro/x86_64/cuda-keyring_1.1-1_all.deb"
  apt_install "$WORK/cuda-keyring.deb"  # through apt, which waits for the lock
  apt_get update -q
}
