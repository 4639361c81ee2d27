#!/usr/bin/env bash
# The node's expiry is armed by cloud-init itself, before the recipe runs (the TTL section of
# images/templates/cloud-init.yaml.j2), so a node whose recipe fails still goes away on time.
# This step only checks that the timer is there and enabled, and enables it again if not.
# An image builder has one too (components/bake.py); its seal removes it before the capture.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

[ -n "${GPUFLEET_EXPIRES_AT:-}${GPUFLEET_EXPIRY_TAG:-}" ] || skip "no TTL"
units="$R/etc/systemd/system"
when="$(date -u -d "@${GPUFLEET_EXPIRES_AT:-0}" '+%Y-%m-%d %H:%M:%S UTC')"
[ -n "${GPUFLEET_EXPIRES_AT:-}" ] || when="the instance tag $GPUFLEET_EXPIRY_TAG"
if [ ! -f "$units/gpufleet-ttl.timer" ] || [ ! -x "$R/usr/local/sbin/gpufleet-expire" ]; then
  fail "cloud-init wrote no expiry timer (gpufleet-ttl.timer, gpufleet-expire): this node would never expire"
fi
systemctl is-enabled --quiet gpufleet-ttl.timer && satisfied "expiry timer enabled, hard expiry $when"
systemctl enable --now gpufleet-ttl.timer
log "expiry timer enabled again, hard expiry $when"
