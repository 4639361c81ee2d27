#!/usr/bin/env bash
# The bundled local NVMe SSDs (GCP A2 Ultra / A3: up to 16 x 375 GB) as one RAID0 on
# /mnt/localssd, as Cluster Toolkit's A3 blueprints do. Scratch space: GCE keeps its data
# across a reboot, never across a stop or a deletion.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

mnt=/mnt/localssd
md=/dev/md/gpufleet-localssd
disks=()
for d in "$R"/dev/disk/by-id/google-local-nvme-ssd-*; do [ -e "$d" ] && disks+=("${d#"$R"}"); done
[ "${#disks[@]}" -gt 0 ] || skip "no local SSDs"
mountpoint -q "$R$mnt" && satisfied "${#disks[@]} local SSDs on $mnt"
# After a reboot the array is there already; only a first boot creates it.
mdadm --assemble "$md" "${disks[@]}" >/dev/null 2>&1 || {
  log "creating RAID0 of ${#disks[@]} local SSDs"
  mdadm --create "$md" --name=gpufleet-localssd --level=0 --force --run \
    --raid-devices="${#disks[@]}" "${disks[@]}"
  mkfs.ext4 -F -q "$md"
}
mkdir -p "$R$mnt"
mount -o discard,defaults,nofail "$md" "$R$mnt"
chmod 1777 "$R$mnt"
log "${#disks[@]} local SSDs mounted on $mnt"
