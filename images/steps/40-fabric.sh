#!/usr/bin/env bash
# The fast fabric's user space: EFA installer (AWS), IB + peer memory (Azure ND),
# TCPX/TCPXO NCCL plugin and receive-data-path daemon (GCP A3).
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

RXDM=gpufleet-rxdm  # the container name of the TCPX/TCPXO receive-data-path manager

case "${GPUFLEET_FABRIC:-none}" in
  efa)
    # facts §1.5: the installer brings libfabric, the EFA provider and aws-ofi-nccl.
    "$EFA_BIN/fi_info" -p efa >/dev/null 2>&1 && satisfied "libfabric sees the EFA provider"
    v="${GPUFLEET_EFA_INSTALLER:?missing from the version set}"
    log "installing EFA $v"
    mkdir -p "$WORK"
    curl -fsSLo "$WORK/aws-efa-installer-$v.tar.gz" "https://efa-installer.amazonaws.com/aws-efa-installer-$v.tar.gz"
    tar -xzf "$WORK/aws-efa-installer-$v.tar.gz" -C "$WORK"
    (cd "$WORK/aws-efa-installer" && ./efa_installer.sh -y)
    ;;
  infiniband)
    # facts §3.2-3.4: ubuntu-hpc brings OFED; GPUDirect RDMA needs nvidia-peermem loaded.
    # Count devices with an InfiniBand port: accelerated networking's Ethernet VF (mlx5_an0)
    # is an RDMA device too and would pass a count of names.
    devices=0
    for d in "$R"/sys/class/infiniband/*; do
      for ll in "$d"/ports/*/link_layer; do
        if [ "$(cat "$ll" 2>/dev/null)" = InfiniBand ]; then
          devices=$((devices + 1))
          break
        fi
      done
    done
    [ "$devices" -gt 0 ] || fail "no InfiniBand devices under /sys/class/infiniband"
    lsmod | grep -q '^nvidia_peermem' && satisfied "$devices IB devices, nvidia-peermem loaded"
    if reboot_pending; then
      log "$devices IB devices; nvidia-peermem loads after the reboot"
      exit 0
    fi
    modprobe nvidia-peermem
    log "$devices IB devices; nvidia-peermem loaded"
    ;;
  tcpx | tcpxo)
    # What the receive daemon needs from the host (Cluster Toolkit's A3 blueprints): without
    # it every NCCL job fails, so say so here rather than in the first job.
    if [ "$GPUFLEET_FABRIC" = tcpx ]; then
      case "$(uname -r)" in
        *tcpx*) ;;
        *) grep -qs '^ID=cos' "$R/etc/os-release" || fail "GPUDirect-TCPX needs the linux-gcp-tcpx kernel (or COS); running $(uname -r)" ;;
      esac
    elif ! modinfo import-helper >/dev/null 2>&1 && [ ! -d "$R/dev/aperture_devices" ]; then
      fail "GPUDirect-TCPXO needs the dmabuf import-helper module and /dev/aperture_devices"
    fi
    # facts §2.5: the plugin image installs into /var/lib/<fabric>/lib64; the daemon serves it.
    dir="$R/var/lib/${GPUFLEET_FABRIC}/lib64"
    running="$(docker inspect -f '{{.State.Running}}' "$RXDM" 2>/dev/null || true)"
    if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ] && [ "$running" = true ]; then
      satisfied "NCCL plugin in $dir, $RXDM running"
    fi
    if [ "$GPUFLEET_FABRIC" = tcpx ]; then
      plugin="${GPUFLEET_TCPX_PLUGIN:?}" rxdm="${GPUFLEET_TCPX_RXDM:?}"
    else
      plugin="${GPUFLEET_TCPXO_PLUGIN:?}" rxdm="${GPUFLEET_TCPXO_RXDM:?}"
    fi
    if [ ! -d "$dir" ] || [ -z "$(ls -A "$dir")" ]; then
      log "installing the $GPUFLEET_FABRIC NCCL plugin from $plugin"
      docker run --rm -v /var/lib:/var/lib "$plugin" install --install-nccl
    fi
    if reboot_pending; then
      log "$RXDM starts after the reboot (it needs the GPUs)"
      exit 0
    fi
    docker rm -f "$RXDM" >/dev/null 2>&1 || true
    if [ "$GPUFLEET_FABRIC" = tcpx ]; then
      mkdir -p "$R/run/tcpx"  # the socket directory the daemon and NCCL share
      docker run --detach --restart=always --name "$RXDM" --privileged --network=host --gpus all \
        -v /run/tcpx:/run/tcpx --entrypoint /tcpgpudmarxd/build/app/tcpgpudmarxd "$rxdm" \
        --gpu_nic_preset a3vm --gpu_shmem_type fd --uds_path /run/tcpx --setup_param "--verbose 128 2 0"
    else
      docker run --detach --restart=always --name "$RXDM" --privileged --network=host --gpus all \
        --entrypoint /fts/entrypoint_rxdm_container.sh "$rxdm" \
        --num_hops=2 --num_nics=8 --uid= --alsologtostderr
    fi
    log "$GPUFLEET_FABRIC plugin installed, $RXDM started"
    ;;
  *) skip "no fast fabric on this node" ;;
esac
