#!/usr/bin/env bash
# Base packages every later step and the health check use.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

PACKAGES=(ca-certificates curl gnupg jq pciutils python3)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ "${#missing[@]}" -eq 0 ] && satisfied "${PACKAGES[*]}"
log "installing ${missing[*]}"
apt_get update -q
apt_install "${missing[@]}"
