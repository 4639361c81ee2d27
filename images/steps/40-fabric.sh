#!/usr/bin/env bash
# The fast fabric's user space: EFA installer (AWS), IB + peer memory (Azure ND), TCPX/TCPXO (A3).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

case "${GPUFLEET_FABRIC:-none}" in
  efa)
    fi_info -p efa >/dev/null 2>&1 && satisfied "libfabric sees the EFA provider"
    v="${GPUFLEET_EFA_INSTALLER:?missing from the version set}"
    log "installing EFA $v"
    curl -fsSLo "/tmp/aws-efa-installer-$v.tar.gz" "https://efa-installer.amazonaws.com/aws-efa-installer-$v.tar.gz"
    tar -xzf "/tmp/aws-efa-installer-$v.tar.gz" -C /tmp
    (cd /tmp/aws-efa-installer && ./efa_installer.sh -y)
    ;;
  infiniband)
    devices=0
    for d in "$R"/sys/class/infiniband/mlx5*; do [ -e "$d" ] && devices=$((devices + 1)); done
    [ "$devices" -gt 0 ] || { log "no InfiniBand devices under /sys/class/infiniband"; exit 1; }
    lsmod | grep -q '^nvidia_peermem' && satisfied "$devices IB devices, nvidia-peermem loaded"
    modprobe nvidia-peermem
    ;;
  tcpx | tcpxo)
    dir="$R/var/lib/${GPUFLEET_FABRIC}/lib64"
    [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && satisfied "NCCL plugin in $dir"
    if [ "$GPUFLEET_FABRIC" = tcpx ]; then image="${GPUFLEET_TCPX_PLUGIN:?}"; else image="${GPUFLEET_TCPXO_PLUGIN:?}"; fi
    log "installing the $GPUFLEET_FABRIC NCCL plugin from $image"
    docker run --rm -v "/var/lib:/var/lib" "$image" install --install-nccl
    ;;
  *) skip "no fast fabric on this node" ;;
esac
