#!/usr/bin/env bash
# The fabric's NCCL settings (components/fabric.py, written by cloud-init to
# /etc/gpufleet/nccl.env): NCCL_* merged into /etc/nccl.conf, which NCCL reads itself; everything,
# plus the fabric's plugin directories on LD_LIBRARY_PATH, into a login profile file.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

src="$R/etc/gpufleet/nccl.env"
[ -s "$src" ] || skip "no NCCL settings for fabric ${GPUFLEET_FABRIC:-none}"
conf="$R/etc/nccl.conf"
profile="$R/etc/profile.d/gpufleet-nccl.sh"
want_conf="$(grep '^NCCL_' "$src" || true)"
want_profile="$(sed 's/^\([A-Za-z_][A-Za-z0-9_]*\)=\(.*\)$/export \1="\2"/' "$src")"
libpath="${GPUFLEET_NCCL_LIBRARY_PATH:-}"
if [ "${GPUFLEET_FABRIC:-none}" = efa ]; then
  # aws-ofi-nccl's directory depends on the EFA installer's package and the OS, not on one
  # installer version: lib64, lib/<arch>-linux-gnu (Ubuntu packages, old and new),
  # lib (Amazon Linux and RHEL), /opt/aws-ofi-nccl/lib (DLAMIs that built it there). The one
  # holding the plugin goes first.
  for d in /opt/amazon/ofi-nccl/lib64 "/opt/amazon/ofi-nccl/lib/$(uname -m)-linux-gnu" \
    /opt/amazon/ofi-nccl/lib /opt/aws-ofi-nccl/lib; do
    compgen -G "$R$d/libnccl-net*.so" >/dev/null || continue
    case ":$libpath:" in *":$d:"*) ;; *) libpath="$d${libpath:+:$libpath}" ;; esac
    # Since aws-ofi-nccl PR #808 (2025-03) the plugin is libnccl-net-ofi.so, libnccl-net.so a
    # link to it; NCCL_NET_PLUGIN=ofi loads it by that name (NCCL env docs, NCCL_NET_PLUGIN),
    # where a NCCL_NET_PLUGIN set to another plugin (NGC images set spcx) would leave NCCL on
    # sockets.
    if [ -e "$R$d/libnccl-net-ofi.so" ]; then
      want_conf+=$'\nNCCL_NET_PLUGIN=ofi'
      want_profile+=$'\nexport NCCL_NET_PLUGIN="ofi"'
    fi
    break
  done
fi
if [ -n "$libpath" ]; then
  # shellcheck disable=SC2016  # expanded when the profile is sourced, not now
  want_profile+="$(printf '\nexport LD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"' \
    "$libpath")"
fi
if [ "${GPUFLEET_FABRIC:-none}" = tcpxo ]; then
  # The TCPXO plugin ships its own tuned settings (facts §2.5).
  want_profile+=$'\nif [ -f /var/lib/tcpxo/lib64/nccl-env-profile.sh ]; then . /var/lib/tcpxo/lib64/nccl-env-profile.sh; fi'
fi
# /etc/nccl.conf may come with the image: Azure's ubuntu-hpc writes NCCL_TOPO_FILE and more
# into it at boot. Merge: the image's lines stay unless the fabric table sets the same key.
# What the image wrote is the file as found whenever it differs from what this step last wrote.
base="$STATE/nccl.conf.image"
written="$STATE/nccl.conf.written"
mkdir -p "$STATE"
if [ -f "$conf" ] && ! cmp -s "$conf" "$written"; then cp "$conf" "$base"; fi
keep="$(awk -F= 'NR == FNR { if ($1 != "") set[$1] = 1; next } NF && !($1 in set)' \
  <(printf '%s\n' "$want_conf") "$base" 2>/dev/null || true)"
want_conf="$(printf '%s\n%s\n' "$keep" "$want_conf" | sed '/^$/d')"
if [ -f "$conf" ] && [ -f "$profile" ] && [ "$(cat "$conf")" = "$want_conf" ] \
  && [ "$(cat "$profile")" = "$want_profile" ]; then
  satisfied "$conf and $profile match the fabric table"
fi
mkdir -p "$(dirname "$conf")" "$(dirname "$profile")"
printf '%s\n' "$want_conf" >"$conf"
cp "$conf" "$written"
printf '%s\n' "$want_profile" >"$profile"
log "wrote $conf and $profile"
