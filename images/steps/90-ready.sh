#!/usr/bin/env bash
# The readiness marker: what is installed, as JSON, with each step's time from the runner's log.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

out="$R/var/lib/gpufleet/ready.json"
mkdir -p "$(dirname "$out")"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true)"
fm="$(nv-fabricmanager --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -n1 || true)"
ctk="$(nvidia-ctk --version 2>/dev/null | grep -o '[0-9][0-9.]*' | head -n1 || true)"
efa="$(fi_info --version 2>/dev/null | grep -o 'libfabric: [0-9.]*' | cut -d' ' -f2 || true)"
steps="$(awk '{printf "%s{\"step\":\"%s\",\"result\":\"%s\",\"seconds\":%s}", (NR>1?",":""), $1, $2, $3}' \
  "$R/var/log/gpufleet/steps.log" 2>/dev/null || true)"
printf '{"cluster":"%s","node":"%s","version_set":"%s","driver":"%s","fabric_manager":"%s","container_toolkit":"%s","libfabric":"%s","fabric":"%s","steps":[%s]}\n' \
  "${GPUFLEET_CLUSTER:-}" "${GPUFLEET_NODE:-}" "${GPUFLEET_VERSION_SET:-}" "$driver" "$fm" "$ctk" "$efa" \
  "${GPUFLEET_FABRIC:-none}" "$steps" >"$out.tmp"
mv "$out.tmp" "$out"
log "ready: $out"
