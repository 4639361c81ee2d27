#!/usr/bin/env bash
# Docker and the NVIDIA container toolkit, wired into Docker (facts §4.2).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
daemon="$R/etc/docker/daemon.json"
want="${GPUFLEET_CONTAINER_TOOLKIT:?missing from the version set}"
have="$(nvidia-ctk --version 2>/dev/null | grep -o '[0-9]\+\.[0-9]\+\.[0-9]\+' | head -n1 || true)"
if command -v docker >/dev/null && [ -n "$have" ] && { [ "$have" = "$want" ] || ! strict; } \
  && [ -f "$daemon" ] && grep -q '"nvidia"' "$daemon"; then
  satisfied "docker with the nvidia runtime (toolkit $have, pinned $want)"
fi
command -v docker >/dev/null || apt_install docker.io
if [ -z "$have" ] || { [ "$have" != "$want" ] && strict; }; then
  keyring="$R/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
  mkdir -p "$(dirname "$keyring")" "$R/etc/apt/sources.list.d"
  curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --batch --yes --dearmor -o "$keyring"
  curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \
    | sed "s#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#g" \
    >"$R/etc/apt/sources.list.d/nvidia-container-toolkit.list"
  apt_get update -q
  # All four at one version: apt would otherwise pick the newest for the dependencies.
  apt_install --allow-downgrades "nvidia-container-toolkit=$want-1" \
    "nvidia-container-toolkit-base=$want-1" "libnvidia-container-tools=$want-1" \
    "libnvidia-container1=$want-1"
fi
nvidia-ctk runtime configure --runtime=docker
systemctl restart docker
log "docker uses the nvidia runtime (toolkit $want)"
