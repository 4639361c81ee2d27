#!/usr/bin/env bash
# gpufleet's boot pull (cloud-init's gpufleet-pull.service runs it as root): the registry part of
# container_pull.sh, small enough for EC2's 16 KB of user data. Arguments: IMAGE RUNTIMES STATE
# STALL ATTEMPTS (RUNTIMES: "docker podman", the first that answers is used; the Azure identity
# from /etc/gpufleet/env, as container_pull.sh). The same status.json and last line, the same stall watch over the download folders,
# retries and wait for a restarting daemon. It starts once the recipe's 30-container step is
# done (its line in the runner's steps log): that step restarts docker after configuring the
# nvidia runtime, which would break a pull in flight; on the way up from the driver reboot the
# step is satisfied and restarts nothing. The line
# "#@login" (a line of its own) is replaced by container_pull.sh's registry logins for this image's registry
# (components/containerpull.py boot_script).
# shellcheck disable=SC2034,SC2154,SC2317,SC2086  # $dl: globs; used and set by the registry logins put in below
set -uo pipefail
shopt -s lastpipe
umask 022
[ $# = 5 ] && mkdir -p "$3" || exit 2
image=$1 runtime=$2 state=$3 stall=$4 attempts=$5 client_id=''
poll=${GPUFLEET_PULL_POLL:-2} ngc_key='' host=${image%%/*} sf=$state/status.json
st_state=pulling st_bytes=0 st_attempt=0 st_digest='' st_error='' waited=0 base=0
js() {
  local s=${1//\\/\\\\}
  s=${s//[[:cntrl:]]/ }
  printf '"%s"' "${s//\"/\\\"}"
}
ws() {
  printf '{"state":%s,"bytes":%d,"attempt":%d,"digest":%s,"error":%s,"updated":%s,"image":%s}' \
    "$(js "$st_state")" "$st_bytes" "$st_attempt" "$(js "$st_digest")" "$(js "$st_error")" \
    "$(date +%s.%3N)" "$(js "$image")" >"$sf.$$" && mv -f "$sf.$$" "$sf"
}
finish() {
  [ "$1" = 0 ] || st_state=failed
  ws
  echo "gpufleet-pull:$(cat "$sf")"
  exit "$1"
}
# up: 0 once the recipe's container step is done and a runtime of the list answers (the first
# time: which one is used from then on); waits at most $1 seconds in all
up() {
  local r t0
  while :; do
    if grep -q '^30-container ' "${GPUFLEET_PULL_STEPS_LOG:-/var/log/gpufleet/steps.log}" 2>/dev/null; then
      for r in $runtime; do
        "$r" info >/dev/null 2>&1 && runtime=$r && return 0
      done
    fi
    [ "$waited" -lt "$1" ] || return 1
    t0=$(date +%s)
    sleep "$poll"
    waited=$((waited + $(date +%s) - t0))
  done
}
up 1800 || { st_error="no $runtime after the recipe's 30-container step"; finish 1; }
rt=("$runtime") waited=0
if grep -qF "\"image\":$(js "$image")" "$sf" 2>/dev/null && grep -qF '"state":"done"' "$sf" \
  && "${rt[@]}" image inspect "$image" >/dev/null 2>&1; then
  echo "gpufleet-pull:$(cat "$sf")"
  exit 0
fi
rm -rf "$state"/auth.*
auth_dir=$state/auth.$$ log=$state/auth.$$/log
(umask 077 && mkdir "$auth_dir") || exit 1
trap 'rm -rf "$auth_dir"' EXIT
if [ "$runtime" = docker ]; then
  rt_auth=("${rt[@]}" --config "$auth_dir") login_opts=() pull_opts=()
  dl="$("${rt[@]}" info --format '{{.DockerRootDir}}')/tmp /var/lib/containerd/io.containerd.content.v1.content/ingest"
else
  rt_auth=("${rt[@]}") login_opts=(--authfile "$auth_dir/a.json") pull_opts=("${login_opts[@]}")
  dl="${TMPDIR:-/var/tmp}/container_images_storage*"
fi
#@login
# watch: the pull in the background; stopped after $stall s without new bytes or output (124)
watch() {
  local prev last now cur got=0 pid lines=0 l
  prev=$(du -scb $dl 2>/dev/null | tail -n1 | cut -f1)
  "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  last=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do
    sleep "$poll"
    cur=$(du -scb $dl 2>/dev/null | tail -n1 | cut -f1) now=$(date +%s) l=$(wc -l <"$log")
    [ "$cur" -gt "$prev" ] && got=$((got + cur - prev)) last=$now
    [ "$l" -gt "$lines" ] && lines=$l last=$now
    prev=$cur st_bytes=$((base + got))
    ws
    if [ $((now - last)) -ge "$stall" ]; then
      kill "$pid"
      sleep 1
      kill -9 "$pid" 2>/dev/null
      wait "$pid"
      return 124
    fi
  done
  wait "$pid"
}
# the repo digest: docker lists one per repository the image came from (Docker Hub's short)
digest() {
  [[ "$image" == *@sha256:* ]] && echo "${image##*@}" && return
  [ "$runtime" = podman ] && exec "${rt[@]}" image inspect --format '{{.Digest}}' "$image"
  local r=$image l
  [[ "${image##*/}" == *:* ]] && r=${image%:*}
  "${rt[@]}" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$image" \
    | while read -r l; do
      case "${l%@*}" in "$r" | "${r#docker.io/}" | "${r#docker.io/library/}") echo "${l##*@}" ;; esac
    done
}
for ((n = 1; n <= attempts; n++)); do
  st_attempt=$n st_error=''
  ws
  if ! registry_login 2>"$log"; then
    rc=1
  elif [ "$logged_in" = 1 ]; then
    watch "${rt_auth[@]}" pull "${pull_opts[@]}" "$image"
    rc=$?
  else
    watch "${rt[@]}" pull "$image"
    rc=$?
  fi
  base=$st_bytes
  if [ "$rc" = 0 ]; then
    st_digest=$(digest 2>/dev/null | head -n1)
    [[ "$st_digest" == sha256:* ]] && st_state='done' && finish 0
    st_error="no digest for $image"
  elif [ "$rc" = 124 ]; then
    st_error="no new bytes for ${stall}s (attempt $n of $attempts): stopped"
  else
    st_error=$(tail -n 3 "$log" | tr '\n' ' ')
  fi
  # a daemon restarted under the pull: waited for (10 min in all), the attempt not counted
  if ! "${rt[@]}" info >/dev/null 2>&1 && up 600; then
    echo "gpufleet-pull: $runtime restarted during attempt $n: not counted" >&2
    n=$((n - 1))
    continue
  fi
  echo "gpufleet-pull: attempt $n of $attempts failed: $st_error" >&2
  [ "$n" -lt "$attempts" ] && sleep $((n * 2))
done
finish 1
