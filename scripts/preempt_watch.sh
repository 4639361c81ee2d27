#!/usr/bin/env bash
# gpufleet's preemption watcher: polls the cloud's notice on the node and, on a notice, writes
# DIR/preempted (JSON, atomic) and sends SIGTERM once to every process whose environment holds
# GPUFLEET_RUN_ID (the job's ranks), so they can checkpoint before the node goes.
# Interface (components/preempt.py): bash preempt_watch.sh --cloud aws|gcp|azure --state DIR
#   [--url BASE] [--every S] [--sandbox CLUSTER --node NODE]
# --url: the metadata service (tests and the sandbox point it at a fake); --sandbox/--node: on
# the sandbox, where every node shares one host, only processes whose environment also holds
# GPUFLEET_SANDBOX=CLUSTER and GPUFLEET_NODE=NODE are this node's.
# Notices (docs/node-image.md, "Preemption notices", has the sources):
#   aws: GET latest/meta-data/spot/instance-action with an IMDSv2 token, every 5 s; 404 until a
#        notice, then {"action": "terminate|stop|hibernate", "time": "...Z"}, ~2 min ahead.
#        latest/meta-data/events/recommendations/rebalance is ADVISORY: a rebalance
#        recommendation is not a preemption (the instance may run for hours), so it only writes
#        DIR/rebalance and signals nothing.
#   gcp: GET computeMetadata/v1/instance/preempted?wait_for_change=true (Metadata-Flavor:
#        Google), a hanging GET that returns when the value changes; TRUE on a preemption
#        (Spot VMs: 30 s between the soft and the hard power-off).
#   azure: GET metadata/scheduledevents (Metadata: true) every few seconds; an event
#        EventType Preempt whose Resources holds this VM's name; NotBefore is the deadline
#        (at least 30 s). The first call enables the service: this runs at boot.
set -uo pipefail
umask 022

cloud='' state='' url='' every='' sandbox='' node=''
usage() { echo "usage: $0 --cloud aws|gcp|azure --state DIR [--url BASE] [--every S] [--sandbox CLUSTER --node NODE]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cloud) cloud=${2:-}; shift 2 ;;
    --state) state=${2:-}; shift 2 ;;
    --url) url=${2:-}; shift 2 ;;
    --every) every=${2:-}; shift 2 ;;
    --sandbox) sandbox=${2:-}; shift 2 ;;
    --node) node=${2:-}; shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$state" ] || usage
case "$cloud" in
  aws) url=${url:-http://169.254.169.254}; every=${every:-5} ;;
  gcp) url=${url:-http://metadata.google.internal}; every=${every:-5} ;;
  azure) url=${url:-http://169.254.169.254}; every=${every:-2} ;;
  *) usage ;;
esac
[[ "$every" =~ ^[0-9]+([.][0-9]+)?$ ]] || usage
if [ -n "$sandbox" ] && [ -z "$node" ]; then usage; fi
url=${url%/}
mkdir -p "$state" || exit 1
notice="$state/preempted"
log() { printf '%s preempt_watch: %s\n' "$(date -u +%FT%TZ)" "$*" >&2; }

# A notice left from an earlier boot (a Spot stop or hibernate, then a start) is not this one's.
btime=$(awk '/^btime/ {print $2}' /proc/stat 2>/dev/null)
for f in "$notice" "$state/rebalance"; do
  if [ -e "$f" ] && [ -n "$btime" ] && [ "$(stat -c %Y "$f")" -lt "$btime" ]; then rm -f "$f"; fi
done

json_str() {  # a JSON string: backslashes and quotes escaped, control characters dropped
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  printf '"%s"' "$(printf '%s' "$s" | tr -d '\000-\037')"
}

epoch_of() {  # epoch seconds of a date the cloud gave (ISO 8601 or RFC 1123), or null
  local t
  if [ -n "$1" ] && t=$(date -u -d "$1" +%s 2>/dev/null); then printf '%s' "$t"; else printf null; fi
}

write_file() {  # FILE TEXT: atomic
  printf '%s\n' "$2" > "$1.$$.tmp" && mv -f "$1.$$.tmp" "$1"
}

signal_ranks() {  # one grep over every /proc/PID/environ (NUL-separated: -z), then a filter
  local f p n=0 files=()
  mapfile -t files < <(grep -lzE '^GPUFLEET_RUN_ID=.' /proc/[0-9]*/environ 2>/dev/null)
  if [ -n "$sandbox" ] && [ ${#files[@]} -gt 0 ]; then
    mapfile -t files < <(grep -lzxF "GPUFLEET_SANDBOX=$sandbox" "${files[@]}" 2>/dev/null)
  fi
  if [ -n "$sandbox" ] && [ ${#files[@]} -gt 0 ]; then
    mapfile -t files < <(grep -lzxF "GPUFLEET_NODE=$node" "${files[@]}" 2>/dev/null)
  fi
  for f in "${files[@]}"; do
    p=${f#/proc/}
    p=${p%/environ}
    [ "$p" = "$$" ] || [ "$p" = "$BASHPID" ] && continue
    kill -TERM "$p" 2>/dev/null && n=$((n + 1))
  done
  log "SIGTERM sent to $n process(es) with GPUFLEET_RUN_ID"
}

on_notice() {  # KIND DETAIL NOT_BEFORE(epoch|null)
  local doc
  doc="{\"cloud\": $(json_str "$cloud"), \"kind\": $(json_str "$1"), \"detail\": $(json_str "$2"), \"noticed_at\": $(date +%s.%N | cut -c1-14), \"not_before\": $3}"
  write_file "$notice" "$doc"
  log "notice: $doc"
  signal_ranks
  # Once: the ranks checkpoint and exit; nothing is signalled again, and this stays up so that
  # its service is not restarted into a second notice.
  while :; do sleep 3600; done
}

#@aws (a node's copy keeps only its own cloud's block: components/preempt.node_script)
aws_token='' aws_token_at=0
aws_get() {  # PATH -> body on stdout; return 0 on 200, 1 on 404, 2 otherwise
  local now code body
  now=$(date +%s)
  if [ -z "$aws_token" ] || [ $((now - aws_token_at)) -gt 21000 ]; then
    aws_token=$(curl -sf --max-time 3 -X PUT "$url/latest/api/token" \
      -H 'X-aws-ec2-metadata-token-ttl-seconds: 21600') || { aws_token=''; return 2; }
    aws_token_at=$now
  fi
  body=$(curl -s --max-time 3 -w '\n%{http_code}' -H "X-aws-ec2-metadata-token: $aws_token" "$url/$1") || return 2
  code=${body##*$'\n'}
  body=${body%$'\n'*}
  case "$code" in
    200) printf '%s' "$body"; return 0 ;;
    404) return 1 ;;
    401) aws_token=''; return 2 ;;
    *) return 2 ;;
  esac
}

watch_aws() {
  local body when rebalanced=0
  while :; do
    if body=$(aws_get latest/meta-data/spot/instance-action); then
      when=$(sed -n 's/.*"time"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<< "$body" | head -n 1)
      on_notice "spot-$(sed -n 's/.*"action"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<< "$body" | head -n 1)" \
        "$(tr -d '\n' <<< "$body")" "$(epoch_of "$when")"
    fi
    if [ "$rebalanced" = 0 ] && body=$(aws_get latest/meta-data/events/recommendations/rebalance); then
      write_file "$state/rebalance" "{\"cloud\": \"aws\", \"kind\": \"rebalance\", \"detail\": $(json_str "$(tr -d '\n' <<< "$body")"), \"noticed_at\": $(date +%s.%N | cut -c1-14), \"not_before\": null}"
      log "rebalance recommendation (advisory, nothing signalled): $body"
      rebalanced=1
    fi
    sleep "$every"
  done
}

#@end
#@gcp
watch_gcp() {
  local hdr body etag='' q
  hdr=$(mktemp) || exit 1
  trap 'rm -f "$hdr"' EXIT
  while :; do
    q='?wait_for_change=true&timeout_sec=60'
    [ -n "$etag" ] && q="$q&last_etag=$etag"
    [ -z "$etag" ] && q=''  # the first read returns at once, with the ETag to wait on
    if body=$(curl -sf --max-time 75 -D "$hdr" -H 'Metadata-Flavor: Google' \
      "$url/computeMetadata/v1/instance/preempted$q"); then
      etag=$(tr -d '\r' < "$hdr" | sed -n 's/^[Ee][Tt][Aa][Gg]:[[:space:]]*//p' | tail -n 1)
      if [ "$(tr -d '[:space:]' <<< "$body")" = TRUE ]; then
        on_notice preempted "instance/preempted=TRUE" null
      fi
    else
      etag=''
      sleep "$every"
    fi
  done
}

#@end
#@azure
watch_azure() {
  local api='api-version=2020-07-01' name='' doc ev
  while :; do
    if [ -z "$name" ]; then
      name=$(curl -sf --max-time 3 -H 'Metadata: true' \
        "$url/metadata/instance/compute/name?api-version=2021-02-01&format=text") || name=''
    fi
    # every call, the first included: the first enables Scheduled Events for this VM
    if doc=$(curl -sf --max-time 5 -H 'Metadata: true' "$url/metadata/scheduledevents?$api") && [ -n "$name" ]; then
      # one event per line: events hold no nested objects (Resources is a list of names)
      ev=$(tr -d '\n' <<< "$doc" | sed 's/.*"Events"[[:space:]]*:[[:space:]]*\[//' | tr '}' '\n' |
        grep -E '"EventType"[[:space:]]*:[[:space:]]*"Preempt"' |
        grep -E "\"Resources\"[[:space:]]*:[[:space:]]*\\[[^]]*\"$name\"" | head -n 1)
      if [ -n "$ev" ]; then
        ev="${ev#,}"
        ev="${ev#"${ev%%[![:space:]]*}"}}"
        on_notice Preempt "$ev" \
          "$(epoch_of "$(sed -n 's/.*"NotBefore"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' <<< "$ev")")"
      fi
    fi
    sleep "$every"
  done
}

#@end
log "watching $cloud at $url every ${every}s; notice file $notice"
"watch_$cloud"
