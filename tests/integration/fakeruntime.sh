#!/usr/bin/env bash
# FAKE container runtime (installed as `docker` and `podman` on a sandbox node's PATH) for the
# pull tests: it records each call's argv, "pulls" by printing `Downloaded N` lines, and
# reports the digest in its folder (digest.NODE first). Nothing is downloaded or run.
fake=$(cd "$(dirname "$0")" && pwd)
node=${GPUFLEET_NODE:-local}
echo "$node $(basename "$0") $*" >>"$fake/calls.log"
digest() { if [ -f "$fake/digest.$node" ]; then cat "$fake/digest.$node"; else cat "$fake/digest"; fi; }
setting() { if [ -f "$fake/$1" ]; then cat "$fake/$1"; else echo "$2"; fi; }
case $1 in
  login) cat >"$fake/login.$node"; echo "Login Succeeded" ;;
  pull)
    if [ -f "$fake/fail.$node" ]; then cat "$fake/fail.$node" >&2; exit 1; fi
    steps=$(setting steps 3); chunk=$(setting chunk 1000000); delay=$(setting delay 0.2)
    echo "start $node" >>"$fake/events"
    i=1
    while [ "$i" -le "$steps" ]; do sleep "$delay"; echo "Downloaded $((i * chunk))"; i=$((i + 1)); done
    echo "end $node" >>"$fake/events"
    ;;
  image) echo "${*: -1}@$(digest)" ;;
  load)
    if [ -f "$fake/fail.$node" ]; then cat "$fake/fail.$node" >&2; exit 1; fi
    [ -f "$3" ] || { echo "no such file $3" >&2; exit 1; }
    sleep "$(setting load_s 0)"
    echo "$3 $(sha256sum <"$3" | cut -c1-64)" >>"$fake/loaded.$node"
    echo "Loaded image ID: $(digest)"
    ;;
  *) exit 0 ;;
esac
