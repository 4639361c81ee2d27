#!/usr/bin/env bash
# Shared by every step: the root prefix (tests point it at a temp dir), the node's settings
# from /etc/gpufleet/env, and the two ways a step ends.
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

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

gpus_expected() {
  [ "${GPUFLEET_GPUS:-0}" -gt 0 ]
}
