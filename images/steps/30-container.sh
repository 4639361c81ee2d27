#!/usr/bin/env bash
# Docker and the NVIDIA container toolkit, wired into Docker (facts §4.2).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
daemon="$R/etc/docker/daemon.json"
if command -v docker >/dev/null && command -v nvidia-ctk >/dev/null \
  && [ -f "$daemon" ] && grep -q '"nvidia"' "$daemon"; then
  satisfied "docker with the nvidia runtime ($(nvidia-ctk --version 2>/dev/null | head -n1))"
fi
command -v docker >/dev/null || apt_install docker.io
if ! command -v nvidia-ctk >/dev/null; then
  keyring="$R/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
  curl -fsSL https://nvidia.github.io/libnvidia-container/gpgkey | gpg --dearmor -o "$keyring"
  curl -fsSL https://nvidia.github.io/libnvidia-container/stable/deb/nvidia-container-toolkit.list \
    | sed "s#deb https://#deb [signed-by=$keyring] https://#g" \
    > "$R/etc/apt/sources.list.d/nvidia-container-toolkit.list"
  apt-get update -q
  apt_install "nvidia-container-toolkit=${GPUFLEET_CONTAINER_TOOLKIT:?}-1"
fi
nvidia-ctk runtime configure --runtime=docker
systemctl restart docker
