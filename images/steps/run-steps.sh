#!/usr/bin/env bash
# Run every step in order, timing each into /var/log/gpufleet/steps.log ("step result seconds");
# stop at the first failure. A step that installed a driver asks for a reboot: the runner reboots
# and, as a boot service, runs again on the way up (every step is idempotent).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
R="${GPUFLEET_ROOT:-}"
log="$R/var/log/gpufleet/steps.log"
mkdir -p "$(dirname "$log")" "$R/var/lib/gpufleet"
rm -f "$R/var/lib/gpufleet/ready.json" "$R/var/lib/gpufleet/reboot-required"
: >"$log"
for step in "$here"/[0-9][0-9]-*.sh; do
  name="$(basename "$step" .sh)"
  [ "$name" = 90-ready ] && continue
  start="$(date +%s%N)"
  if out="$(bash "$step" 2>&1)"; then result=ok; else result=failed; fi
  printf '%s\n' "$out"
  case "$out" in
    *"already satisfied"*) [ "$result" = ok ] && result=satisfied ;;
    *"skipped:"*) [ "$result" = ok ] && result=skipped ;;
  esac
  ms=$((($(date +%s%N) - start) / 1000000))
  printf '%s %s %d.%03d\n' "$name" "$result" $((ms / 1000)) $((ms % 1000)) >>"$log"
  if [ "$result" = failed ]; then
    echo "gpufleet: step $name failed" >&2
    exit 1
  fi
done
if [ -e "$R/var/lib/gpufleet/reboot-required" ]; then
  echo "gpufleet: rebooting to load the new driver; the steps run again on the way up"
  # A live CLI renews the lease only once SSH answers again, and the TTL timer fires a minute
  # after boot: give an existing lease 15 minutes from now (this node's clock) to cover the reboot.
  lease="$R/var/lib/gpufleet/lease"
  if [ -f "$lease" ]; then
    held="$(cat "$lease" 2>/dev/null || true)"
    until=$(($(date +%s) + 900))
    case "$held" in "" | *[!0-9]*) ;; *) [ "$held" -gt "$until" ] && until="$held" ;; esac
    echo "$until" >"$lease.tmp" && mv -f "$lease.tmp" "$lease"
  fi
  systemctl reboot
  exit 0
fi
bash "$here/90-ready.sh"
