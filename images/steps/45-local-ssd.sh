#!/usr/bin/env bash
# The bundled local NVMe SSDs as one RAID0 on /mnt/localssd: GCP A2 Ultra / A3 (up to 16 x
# 375 GB, as Cluster Toolkit's A3 blueprints do) and Azure ND H100 v5 (8 NVMe disks whose
# model is "Microsoft NVMe Direct Disk", as azhpc/CycleCloud node setups stripe them).
# Scratch space: kept across a reboot, never across a stop, deallocation or deletion.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

mnt=/mnt/localssd
md=/dev/md/gpufleet-localssd
disks=()
for d in "$R"/dev/disk/by-id/google-local-nvme-ssd-*; do [ -e "$d" ] && disks+=("${d#"$R"}"); done
# Azure: the local disks by model, never the OS or data disks (also NVMe on some sizes).
for b in "$R"/sys/block/nvme*n1; do
  case "$(cat "$b/device/model" 2>/dev/null)" in
    "Microsoft NVMe Direct Disk"*)
      # A disk the image already put in an array of its own is left alone.
      if compgen -G "$b/holders/*" >/dev/null && [ ! -e "$R$md" ]; then
        skip "local NVMe disks already in use"
      fi
      disks+=("/dev/${b##*/}")
      ;;
  esac
done
[ "${#disks[@]}" -gt 0 ] || skip "no local SSDs"
mountpoint -q "$R$mnt" && satisfied "${#disks[@]} local SSDs on $mnt"
# After a reboot the array is there already; only a first boot creates it.
[ -e "$R$md" ] || mdadm --assemble "$md" "${disks[@]}" >/dev/null 2>&1 || {
  log "creating RAID0 of ${#disks[@]} local SSDs"
  mdadm --create "$md" --name=gpufleet-localssd --level=0 --force --run \
    --raid-devices="${#disks[@]}" "${disks[@]}"
  # Named in mdadm.conf, the array is assembled under the same name after a reboot (as
  # azhpc's setup_nvme.sh does), not as an anonymous /dev/md127.
  mkdir -p "$R/etc/mdadm"
  grep -qs "gpufleet-localssd" "$R/etc/mdadm/mdadm.conf" ||
    mdadm --detail --scan "$md" >>"$R/etc/mdadm/mdadm.conf"
  # nodiscard: fresh local disks need no TRIM pass over every block before the first boot ends.
  mkfs.ext4 -F -q -E nodiscard "$md"
}
mkdir -p "$R$mnt"
mount -o discard,defaults,nofail "$md" "$R$mnt"
chmod 1777 "$R$mnt"
log "${#disks[@]} local SSDs mounted on $mnt"
