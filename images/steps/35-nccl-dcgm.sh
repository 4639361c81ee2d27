#!/usr/bin/env bash
# NCCL (libnccl2 for nccl-tests and MPI jobs; PyTorch wheels bring their own) and DCGM with its
# host engine, from the CUDA repo (facts §4.5, §4.7). A vendor image's NCCL and DCGM of the same
# major version are kept unless GPUFLEET_STRICT_VERSIONS=1.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

gpus_expected || skip "no GPUs on this node"
nccl_want="${GPUFLEET_NCCL:?missing from the version set}"  # e.g. 2.31.2-1
dcgm_want="${GPUFLEET_DCGM:?missing from the version set}"  # e.g. 4.7.0
cuda_major="${GPUFLEET_CUDA:?missing from the version set}"
cuda_major="${cuda_major%%.*}"

nccl_have="$(nccl_version)"
dcgm_have="$(dcgmi --version 2>/dev/null | grep -o '[0-9]\+\.[0-9]\+\.[0-9]\+' | head -n1 || true)"

nccl_ok=0
if [ "$nccl_have" = "${nccl_want%%-*}" ] || { [ -n "$nccl_have" ] && ! strict; }; then nccl_ok=1; fi
dcgm_ok=0
if [ "$dcgm_have" = "$dcgm_want" ] || { [ -n "$dcgm_have" ] && ! strict && [ "${dcgm_have%%.*}" = "${dcgm_want%%.*}" ]; }; then
  dcgm_ok=1
fi
[ "$nccl_ok$dcgm_ok" = 11 ] && satisfied "NCCL $nccl_have, DCGM $dcgm_have (pinned $nccl_want, $dcgm_want)"

cuda_repo
if [ "$nccl_ok" = 0 ]; then
  v="$(apt_candidate libnccl2 "$nccl_want+cuda$cuda_major")"
  [ -n "$v" ] || fail "no libnccl2 $nccl_want+cuda$cuda_major.* in the apt sources"
  log "installing NCCL $v (had: ${nccl_have:-none})"
  apt_install --allow-downgrades "libnccl2=$v" "libnccl-dev=$v"
fi
if [ "$dcgm_ok" = 0 ]; then
  pkg="datacenter-gpu-manager-${dcgm_want%%.*}-cuda$cuda_major"
  v="$(apt_candidate "$pkg" "$dcgm_want-")"
  [ -n "$v" ] || fail "no $pkg $dcgm_want in the apt sources"
  log "installing $pkg=$v (had: ${dcgm_have:-none})"
  apt_install --allow-downgrades "$pkg=$v"
  enable_unit nvidia-dcgm
fi
