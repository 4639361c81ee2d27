#!/usr/bin/env bash
# The node's own expiry: a systemd timer that removes the node at GPUFLEET_EXPIRES_AT.
# AWS: power off (the instance terminates on shutdown). GCP: nothing (GPUFLEET_TTL_ACTION=none):
# GCE deletes the VM at its terminationTime, and a poweroff first would leave it stopped, billed.
# Azure: a powered-off VM is still billed, so it deletes itself through its managed identity.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

[ "${GPUFLEET_BAKE:-0}" = 1 ] && skip "baking an image: an expiry timer would be baked into every node"
[ -n "${GPUFLEET_EXPIRES_AT:-}" ] || skip "no TTL"
[ "${GPUFLEET_TTL_ACTION:-poweroff}" = none ] && skip "the cloud removes this node at its expiry"
units="$R/etc/systemd/system"
when="$(date -u -d "@$GPUFLEET_EXPIRES_AT" '+%Y-%m-%d %H:%M:%S UTC')"
timer="[Unit]
Description=gpufleet: remove this node at its expiry

[Timer]
OnCalendar=$when
Persistent=true

[Install]
WantedBy=timers.target"
if [ -f "$units/gpufleet-ttl.timer" ] && [ "$(cat "$units/gpufleet-ttl.timer")" = "$timer" ]; then
  satisfied "expiry timer at $when"
fi
mkdir -p "$units" "$R/usr/local/sbin"
cat >"$R/usr/local/sbin/gpufleet-expire" <<'SCRIPT'
#!/usr/bin/env bash
# gpufleet: this node's TTL ran out. Power off whatever happens before it.
set -uo pipefail
# shellcheck source=/dev/null
. "${GPUFLEET_ROOT:-}/etc/gpufleet/env"
if [ "${GPUFLEET_CLOUD:-}" = azure ]; then
  # A powered-off Azure VM is still billed (facts §0.12): the VM deletes itself through the
  # managed identity the Azure component gives it (components/azure). If that fails, power
  # off anyway and leave the VM to `gpufleet down` or a sweeper (it shows as Stopped).
  imds=http://169.254.169.254/metadata
  token="$(curl -fsS -H Metadata:true "$imds/identity/oauth2/token?api-version=2018-02-01&resource=https://management.azure.com/&client_id=${AZURE_CLIENT_ID:-}" | jq -r .access_token)"
  vm="$(curl -fsS -H Metadata:true "$imds/instance/compute/name?api-version=2021-02-01&format=text")"
  if ! curl -fsS -X DELETE -H "Authorization: Bearer $token" \
    "https://management.azure.com/subscriptions/${AZURE_SUBSCRIPTION_ID:-}/resourceGroups/${AZURE_RESOURCE_GROUP:-}/providers/Microsoft.Compute/virtualMachines/$vm?api-version=2024-07-01"; then
    echo "gpufleet-expire: self-delete through ARM failed; powering off (still billed as Stopped)" >&2
  fi
fi
exec systemctl poweroff
SCRIPT
chmod 0755 "$R/usr/local/sbin/gpufleet-expire"
printf '%s\n' "[Unit]
Description=gpufleet: remove this node (expired)

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/gpufleet-expire" >"$units/gpufleet-ttl.service"
printf '%s\n' "$timer" >"$units/gpufleet-ttl.timer"
systemctl daemon-reload
systemctl enable --now gpufleet-ttl.timer
log "expiry timer set for $when"
