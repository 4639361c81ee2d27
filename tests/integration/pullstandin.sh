#!/usr/bin/env bash
# STAND-IN for the node pull script of components/containerpull.py (issue 21, interface 1),
# used by the pull tests until that script is on this branch. Same arguments, stdin secrets,
# status.json and last `gpufleet-pull:{json}` line; no lock, no stall watchdog.
set -u
image='' archive='' transport='' runtime='' sudo='' state='' attempts=3
while [ $# -gt 0 ]; do
  case $1 in
    --image) image=$2; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --sudo) sudo="sudo -n"; shift ;;
    --state) state=$2; shift 2 ;;
    --stall) shift 2 ;;
    --attempts) attempts=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
key=''
while IFS= read -r line; do
  case $line in NGC_API_KEY=*) key=${line#*=} ;; esac
done
name=${image:-$transport:$archive}
mkdir -p "$state"
st="$state/status.json"
status() { # state bytes attempt digest error
  printf '{"state":"%s","bytes":%s,"attempt":%s,"digest":"%s","error":"%s","updated":%s,"image":"%s"}' \
    "$1" "$2" "$3" "$4" "$5" "$(date +%s.%N)" "$name" >"$st.tmp" && mv -f "$st.tmp" "$st"
}
finish() { echo "gpufleet-pull:$(cat "$st")"; [ "$1" = "done" ]; exit $?; }
if grep -q '"state":"done"' "$st" 2>/dev/null && grep -qF "\"image\":\"$name\"" "$st"; then
  finish "done"
fi
if [ -n "$archive" ]; then
  size=$(stat -c %s "$archive") || { status failed 0 1 "" "no archive $archive"; finish failed; }
  status loading 0 1 "" ""
  out=$($sudo "$runtime" load -i "$archive" 2>&1) || {
    status failed 0 1 "" "$(printf '%s' "$out" | tail -n1)"; finish failed; }
  digest=$(printf '%s\n' "$out" | grep -o 'sha256:[0-9a-f]\{64\}' | tail -n1)
  status "done" "$size" 1 "$digest" ""
  finish "done"
fi
if [ -n "$key" ] && [ "${image%%/*}" = nvcr.io ]; then
  # shellcheck disable=SC2016 # the literal user name NGC documents
  printf '%s' "$key" | $sudo "$runtime" login --username '$oauthtoken' --password-stdin nvcr.io >/dev/null
fi
a=1; err=''; got=0
while [ "$a" -le "$attempts" ]; do
  status pulling 0 "$a" "" ""
  got=0
  while IFS= read -r line; do
    case $line in "Downloaded "*) got=${line#Downloaded }; status pulling "$got" "$a" "" "" ;; esac
  done < <($sudo "$runtime" pull "$image" 2>"$state/err"; echo "rc $?" >"$state/rc")
  if [ "$(cat "$state/rc")" = "rc 0" ]; then
    ref=$($sudo "$runtime" image inspect --format '{{index .RepoDigests 0}}' "$image")
    status "done" "$got" "$a" "${ref#*@}" ""
    finish "done"
  fi
  err=$(tail -n1 "$state/err")
  a=$((a + 1))
done
status failed "$got" "$attempts" "" "$err"
finish failed
