#!/usr/bin/env bash
# The fabric's NCCL settings: NCCL_* into /etc/nccl.conf, everything into a profile file.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

src="$R/etc/gpufleet/nccl.env"
[ -s "$src" ] || skip "no NCCL settings for fabric ${GPUFLEET_FABRIC:-none}"
conf="$R/etc/nccl.conf"
profile="$R/etc/profile.d/gpufleet-nccl.sh"
want_conf="$(grep '^NCCL_' "$src" || true)"
want_profile="$(sed 's/^/export /' "$src")"
if [ -f "$conf" ] && [ -f "$profile" ] && [ "$(cat "$conf")" = "$want_conf" ] \
  && [ "$(cat "$profile")" = "$want_profile" ]; then
  satisfied "$conf and $profile match the fabric table"
fi
mkdir -p "$(dirname "$conf")" "$(dirname "$profile")"
printf '%s\n' "$want_conf" >"$conf"
printf '%s\n' "$want_profile" >"$profile"
log "wrote $conf and $profile"
