#!/usr/bin/env bash
# gpufleet's node pull: one image into the node's container runtime, with a no-progress timeout,
# retries, registry login from the node's own identity, and a status file the CLI polls.
# Blocks between `#@TAG` and `#@end` lines (ngc, ecr, gar, acr, archive) are left out of the
# boot copy where the boot pull does not need them (containerpull.boot_script: user data is small).
# Interface (components/containerpull.py): bash container_pull.sh
#   --image REF | --archive FILE --transport oci-archive|docker-archive
#   --runtime docker|podman [--sudo] --state DIR --stall SECONDS --attempts N [--client-id ID]
# --client-id: the Azure managed identity to ask IMDS for (ACR); default GPUFLEET_AZURE_CLIENT_ID
# from the node's /etc/gpufleet/env, where a gpufleet node names its user-assigned identity.
# Secrets arrive ONLY on stdin as NAME=value lines (NGC_API_KEY=...): never argv, env or files.
# Keeps DIR/status.json current (atomic rename, every POLL s); last stdout line is
# gpufleet-pull:{the same JSON}; exit 0 when done, 1 when failed, 2 on bad arguments.
#
# Test-only overrides (never set on a real node; tests/scripts/test_container_pull.py points
# them at a fake metadata server on 127.0.0.1): GPUFLEET_PULL_GCE_METADATA (default
# http://metadata.google.internal), GPUFLEET_PULL_AZURE_IMDS (default http://169.254.169.254),
# GPUFLEET_PULL_ACR_BASE (default https://<registry host>), GPUFLEET_PULL_POLL (default 2 s),
# GPUFLEET_PULL_NODE_ENV (default /etc/gpufleet/env).
#
# Compared with what others do (read 2026-11-25): dstack's shim pulls with a fixed 20-minute
# timeout and credentials sent from its server (runner/internal/shim/docker.go ImagePullTimeout,
# pullImage); SkyPilot runs `docker login --password <secret>` (argv) or, on AWS,
# `aws ecr get-login-password`, and on GAR relies on gcloud (sky/provision/docker_utils.py),
# then a plain `docker pull`. Here: a no-progress timeout, and credentials minted from the
# node's own identity, passed on stdin only.
set -uo pipefail
shopt -s lastpipe  # `printf secret | login USER` runs login here: it records logged_in
# status.json carries no secret and is read by the CLI's user; the auth folder is made 0700
umask 022

image='' archive='' transport=docker runtime='' sudo=0 state='' stall=300 attempts=3 client_id=''
usage() { echo "usage: $0 (--image REF | --archive FILE --transport T) --runtime docker|podman [--sudo] --state DIR [--stall S] [--attempts N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --image) image=${2:-}; shift 2 ;;
    --archive) archive=${2:-}; shift 2 ;;
    --transport) transport=${2:-}; shift 2 ;;
    --runtime) runtime=${2:-}; shift 2 ;;
    --sudo) sudo=1; shift ;;
    --state) state=${2:-}; shift 2 ;;
    --stall) stall=${2:-}; shift 2 ;;
    --attempts) attempts=${2:-}; shift 2 ;;
    --client-id) client_id=${2:-}; shift 2 ;;
    *) usage ;;
  esac
done
case "$runtime" in docker|podman) ;; *) usage ;; esac
[ -n "$state" ] || usage
[[ "$stall" =~ ^[0-9]+$ && "$attempts" =~ ^[0-9]+$ ]] || usage
if [ -n "$archive" ]; then
  case "$transport" in oci-archive|docker-archive) ;; *) usage ;; esac
  label="$transport:$archive"
else
  [ -n "$image" ] || usage
  label=$image
fi
poll=${GPUFLEET_PULL_POLL:-2}
rt=("$runtime")
[ "$sudo" = 1 ] && rt=(sudo -n "$runtime")

# Secrets from stdin (a caller with nothing to send closes it; an open, silent stdin is given
# up on after 10 s). Only names the script knows are kept, in shell variables, never exported.
ngc_key=
#@ngc
if [ ! -t 0 ]; then
  while IFS= read -r -t 10 line; do
    case "$line" in NGC_API_KEY=*) ngc_key=${line#NGC_API_KEY=} ;; esac
  done
fi
#@end

mkdir -p "$state" || { echo "gpufleet-pull: cannot create $state" >&2; exit 1; }
status_file="$state/status.json"
st_state=pulling st_bytes=0 st_attempt=0 st_digest='' st_error=''

json_str() {  # a JSON string literal of $1: backslash, quote and control characters escaped
  local s=${1//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/ }
  s=${s//$'\r'/ }
  s=${s//$'\t'/ }
  printf '"%s"' "${s//[[:cntrl:]]/ }"
}
status_json() {
  printf '{"state":%s,"bytes":%d,"attempt":%d,"digest":%s,"error":%s,"updated":%s,"image":%s}' \
    "$(json_str "$st_state")" "$st_bytes" "$st_attempt" "$(json_str "$st_digest")" \
    "$(json_str "$st_error")" "$(date +%s.%N | cut -c1-14)" "$(json_str "$label")"
}
write_status() {
  status_json >"$status_file.tmp.$$" && mv -f "$status_file.tmp.$$" "$status_file"
}
finish() {  # $1: exit code
  write_status
  printf 'gpufleet-pull:%s\n' "$(cat "$status_file")"
  exit "$1"
}

# One pull of an image at a time per state folder: a second invocation waits for the first,
# then finds its result (flock(1), util-linux).
# The boot pull runs as root in a folder owned by the login user: a lock file either of them
# cannot write is locked through a read-only descriptor (flock(2) takes either).
[ -e "$state/lock" ] || : >"$state/lock"
if [ -w "$state/lock" ]; then exec 9>>"$state/lock"; else exec 9<"$state/lock"; fi
flock 9

prior_done() {  # the status file already says done for this image, and the image is there
  [ -f "$status_file" ] || return 1
  local s
  s=$(cat "$status_file")
  [[ "$s" == *'"state":"done"'* && "$s" == *"\"image\":$(json_str "$label")"* ]] || return 1
  # an archive replaced since that load is loaded again
  [ -z "$archive" ] || [ ! "$archive" -nt "$status_file" ] || return 1
  local ref=$image
  [ -n "$ref" ] || ref=$(sed -n 's/.*"digest":"\([^"]*\)".*/\1/p' "$status_file")
  "${rt[@]}" image inspect "$ref" >/dev/null 2>&1
}
if prior_done; then
  printf 'gpufleet-pull:%s\n' "$(cat "$status_file")"
  exit 0
fi

# --- registry login: credentials minted here, now, from the node's identity -----------------
# In the state folder (the workdir's, or the boot pull's), never /tmp: a pull killed by SIGKILL
# skips the trap, and the next pull here (holding the lock) removes what it left.
rm -rf "$state"/auth.* 2>/dev/null
[ -z "$(ls -d "$state"/auth.* 2>/dev/null)" ] || sudo -n rm -rf "$state"/auth.* 2>/dev/null
auth_dir=$state/auth.$$
(umask 077 && mkdir "$auth_dir") || { echo "gpufleet-pull: cannot create $auth_dir" >&2; exit 1; }
trap 'rm -rf "$auth_dir" 2>/dev/null || sudo -n rm -rf "$auth_dir"' EXIT
# A private, per-pull auth file: the login never lands in ~/.docker/config.json or
# containers-auth.json(5)'s default, and is removed with this folder when the pull ends. Used
# only after a login here: any other pull keeps the node's own configuration (credHelpers,
# proxies, a login the user made on the node).
if [ "$runtime" = docker ]; then
  rt_auth=("${rt[@]}" --config "$auth_dir")  # docker(1): --config is the client's config folder
  login_opts=()
  pull_opts=()
else
  rt_auth=("${rt[@]}")
  login_opts=(--authfile "$auth_dir/auth.json")  # podman-login(1) --authfile
  pull_opts=(--authfile "$auth_dir/auth.json")
fi
host=${image%%/*}
#@login-begin (the registry logins: the boot pull script takes this part too)
json_field() {  # the string value of field $1 in the JSON on stdin (no jq on a bare node)
  local body
  body=$(cat)
  [[ "$body" =~ \"$1\"[[:space:]]*:[[:space:]]*\"([^\"]*)\" ]] && printf '%s' "${BASH_REMATCH[1]}"
}
logged_in=0
login() {  # $1 user; the password on stdin, never argv (login --password-stdin)
  "${rt_auth[@]}" login "${login_opts[@]}" --username "$1" --password-stdin "$host" >/dev/null \
    && logged_in=1
}
#@ngc
login_ngc() {
  # NGC: user `$oauthtoken` (literally), the API key as password (NGC docs, "Generating Your
  # NGC API Key" / org.ngc.nvidia.com/setup/api-keys: "For the username, enter '$oauthtoken'
  # exactly as shown"). Without a key: an anonymous pull (public NGC images allow it).
  [ -n "$ngc_key" ] || return 0
  # shellcheck disable=SC2016  # the literal user name
  printf '%s\n' "$ngc_key" | login '$oauthtoken' || { echo "nvcr.io refused the NGC_API_KEY" >&2; return 1; }
}
#@end
#@ecr
login_ecr() {
  local tok region _
  # ECR: a 12 h token for user AWS from the instance role (AWS ECR docs, "Private registry
  # authentication": `aws ecr get-login-password --region R | docker login --username AWS
  # --password-stdin`); the aws CLI reads the role's credentials from IMDS itself.
  # Without the CLI: amazon-ecr-credential-helper (Debian/Ubuntu package of that name), whose
  # `get` reads the registry on stdin and prints {"Username","Secret"} from the same role
  # (docker-credential-helpers protocol). SkyPilot installs AWS CLI v2 from the network at pull
  # time instead (sky/provision/docker_utils.py); a node here gets neither fetched unasked.
  IFS=. read -r _ _ _ region _ <<<"$host"  # <account>.dkr.ecr[-fips].<region>.amazonaws.com
  if command -v aws >/dev/null; then
    tok=$(aws ecr get-login-password --region "$region") || { echo "aws ecr get-login-password failed: may the instance role ecr:GetAuthorizationToken?" >&2; return 1; }
#@boot-skip (the boot copy has no fallback: the CLI's own pull later has)
  elif command -v docker-credential-ecr-login >/dev/null; then
    tok=$(printf '%s' "$host" | docker-credential-ecr-login get | json_field Secret)
    [ -n "$tok" ] || { echo "docker-credential-ecr-login got no token: does the node's instance role allow ecr:GetAuthorizationToken?" >&2; return 1; }
#@boot-skip-end
  else
    echo "ECR login needs the AWS CLI or amazon-ecr-credential-helper on the node" >&2
    return 1
  fi
  printf '%s\n' "$tok" | login AWS
}
#@end
#@gar
login_gar() {
  local tok
  # GAR/GCR: the VM's service account's access token from the metadata server, user
  # `oauth2accesstoken` (Artifact Registry docs, "Configure authentication to Artifact
  # Registry for Docker", access token; Compute docs, "Authenticate workloads using service
  # accounts": GET .../instance/service-accounts/default/token, header Metadata-Flavor: Google).
  local md=${GPUFLEET_PULL_GCE_METADATA:-http://metadata.google.internal}
  tok=$(curl -fsS --max-time 10 -H 'Metadata-Flavor: Google' \
    "$md/computeMetadata/v1/instance/service-accounts/default/token" | json_field access_token)
  if [ -z "$tok" ]; then
    echo "no token from the GCE metadata server: has the node a service account with artifactregistry.reader?" >&2
    return 1
  fi
  printf '%s\n' "$tok" | login oauth2accesstoken
}
#@end
#@acr
login_acr() {
  local tok reg
  # ACR: the managed identity's Entra token from IMDS (Azure docs, "How to use managed
  # identities ... to acquire an access token": GET /metadata/identity/oauth2/token, header
  # Metadata: true; client_id= picks the user-assigned identity, else IMDS picks the system
  # one or fails when there are several), for the ACR audience containerregistry.azure.net,
  # which registries with ARM audience tokens disabled (`az acr config authentication-as-arm`)
  # still accept, and all others too (Azure docs, "Azure Container Registry Entra
  # authentication: ARM audience tokens"), exchanged at the registry's /oauth2/exchange for an ACR refresh token
  # (Azure/acr docs/AAD-OAuth.md), used as the password of the null-GUID user (Azure docs,
  # "az acr login --expose-token": username 00000000-0000-0000-0000-000000000000).
  local imds=${GPUFLEET_PULL_AZURE_IMDS:-http://169.254.169.254}
  local base=${GPUFLEET_PULL_ACR_BASE:-https://$host}
  local q=api-version=2018-02-01\&resource=https%3A%2F%2Fcontainerregistry.azure.net
  if [ -z "$client_id" ] && [ -r "${GPUFLEET_PULL_NODE_ENV:-/etc/gpufleet/env}" ]; then
    client_id=$(sed -n 's/^GPUFLEET_AZURE_CLIENT_ID=//p' "${GPUFLEET_PULL_NODE_ENV:-/etc/gpufleet/env}")
  fi
  [[ "$client_id" =~ ^[0-9a-fA-F-]+$ ]] && q="$q&client_id=$client_id"
  tok=$(curl -fsS --max-time 10 -H 'Metadata: true' "$imds/metadata/identity/oauth2/token?$q" \
    | json_field access_token)
  if [ -z "$tok" ]; then
    echo "no token from Azure IMDS: has the node a managed identity with AcrPull on $host?" >&2
    return 1
  fi
  # the token goes in the POST body from stdin (curl --data-binary @-), never curl's argv
  reg=$(printf 'grant_type=access_token&service=%s&access_token=%s' "$host" "$tok" \
    | curl -fsS --max-time 20 -H 'Content-Type: application/x-www-form-urlencoded' \
      --data-binary @- "$base/oauth2/exchange" | json_field refresh_token)
  if [ -z "$reg" ]; then
    echo "$host/oauth2/exchange refused the managed identity's token" >&2
    return 1
  fi
  printf '%s\n' "$reg" | login 00000000-0000-0000-0000-000000000000
}
#@end
# (the boot copy calls its registry's login_* directly)
#@dispatch
registry_login() {
  if [[ "$host" == nvcr.io ]]; then
    login_ngc
  elif [[ "$host" =~ ^[0-9]{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?$ ]]; then
    login_ecr
  elif [[ "$host" =~ ^([a-z0-9-]+-docker\.pkg\.dev|([a-z]+\.)?gcr\.io)$ ]]; then
    login_gar
  elif [[ "$host" =~ ^[a-z0-9]{5,50}\.azurecr\.io$ ]]; then
    login_acr
  fi
}
#@end
#@login-end

# --- bytes: growth of the runtime's download folders ------------------------------------------
# Measured, not parsed: neither runtime prints machine-readable progress without a TTY. Only the
# folders a pull downloads into, never the whole store: on a big host `du` of the store takes
# long, and a running container writing its overlay would count as new bytes and hide a stall.
# docker: the classic store downloads each blob into <DockerRootDir>/tmp (GetImageBlob*), the
# containerd image store into containerd's content ingest folder; podman (containers/image)
# copies blobs into a container_images_storage* folder under image_copy_tmp_dir (default
# /var/tmp, TMPDIR wins; containers.conf(5)). A blob leaves the folder when it is complete, so
# the figure is the sum of growth between polls: bytes received, layer unpacking not counted.
dl_globs=()
if [ "$runtime" = docker ]; then
  r=$("${rt[@]}" info --format '{{.DockerRootDir}}' 2>/dev/null) && [ -n "$r" ] && dl_globs+=("$r/tmp")
  dl_globs+=(/var/lib/containerd/io.containerd.content.v1.content/ingest)
else
  dl_globs+=("${TMPDIR:-/var/tmp}/container_images_storage*")
fi
#@archive
# A load reads a local file and writes its layers into the store itself, silently: without the
# store, a load longer than --stall (a 20 GB archive) would be taken for a stall and killed.
if [ -n "$archive" ]; then
  if [ "$runtime" = docker ]; then
    [ -n "${r:-}" ] && dl_globs+=("$r")
  else
    g=$("${rt[@]}" info --format '{{.Store.GraphRoot}}' 2>/dev/null) && [ -n "$g" ] && dl_globs+=("$g")
  fi
fi
#@end
disk_bytes() {
  local n=0 d b
  # shellcheck disable=SC2068  # the podman entry is a glob
  for d in ${dl_globs[@]}; do
    [ -e "$d" ] || [ "$sudo" = 1 ] || continue
    b=$( (if [ "$sudo" = 1 ]; then sudo -n du -sb "$d"; else du -sb "$d"; fi) 2>/dev/null | cut -f1)
    n=$((n + ${b:-0}))
  done
  echo "$n"
}

# One attempt: the runtime's command in the background, watched; killed after `stall` seconds
# without new bytes. Returns its exit code, 124 when stalled.
watch_run() {
  local log=$1; shift
  local prev last_growth now cur got=0 pid rc lines=0 l
  prev=$(disk_bytes)
  "$@" >"$log" 2>&1 </dev/null &
  pid=$!
  last_growth=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do
    sleep "$poll"
    cur=$(disk_bytes)
    now=$(date +%s)
    if [ "$cur" -gt "$prev" ]; then got=$((got + cur - prev)); last_growth=$now; fi
    prev=$cur
    # a new line from the runtime (a layer downloaded, unpacked) is progress too
    l=$(wc -l <"$log")
    if [ "$l" -gt "$lines" ]; then lines=$l; last_growth=$now; fi
    st_bytes=$((prior_bytes + got))
    write_status
    if [ $((now - last_growth)) -ge "$stall" ] && kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null
      sleep 1
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
  done
  wait "$pid"
  rc=$?
  cur=$(disk_bytes)
  [ "$cur" -gt "$prev" ] && got=$((got + cur - prev))
  st_bytes=$((prior_bytes + got))
  return "$rc"
}

digest_of_image() {
  local d=''
  case "$image" in *@sha256:*) echo "${image##*@}"; return 0 ;; esac
  if [ "$runtime" = podman ]; then
    d=$("${rt[@]}" image inspect --format '{{.Digest}}' "$image" 2>/dev/null)
  else
    # RepoDigests holds repo@sha256:<manifest digest>, one per repository the image came from;
    # docker writes Docker Hub's in the familiar form (ubuntu@..., not docker.io/library/ubuntu@)
    local repo=$image line first=''
    [[ "${repo##*/}" == *:* ]] && repo=${repo%:*}
    local fam=${repo#docker.io/}
    fam=${fam#library/}
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      [ -n "$first" ] || first=${line##*@}
      if [ "${line%@*}" = "$repo" ] || [ "${line%@*}" = "$fam" ]; then d=${line##*@}; break; fi
    done < <("${rt[@]}" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$image" 2>/dev/null)
    [ -n "$d" ] || d=$first
  fi
  [[ "$d" == sha256:* ]] && echo "$d"
}
#@archive
loaded_id() {  # the image id (config digest) of what `load` printed
  local out=$1 name id
  name=$(sed -n 's/^Loaded image[^:]*: *//p' "$out" | tail -n1)
  name=${name%%,*}
  [ -n "$name" ] || return 1
  id=$("${rt[@]}" image inspect --format '{{.Id}}' "$name" 2>/dev/null) || return 1
  [[ "$id" == sha256:* ]] || id="sha256:$id"  # podman prints the bare hex
  echo "$id"
}
#@end

log=$auth_dir/runtime.log
prior_bytes=0
[ -n "$archive" ] && st_state=loading
write_status
if [ -n "$archive" ] && [ ! -f "$archive" ]; then
  st_state=failed st_error="no archive at $archive on this node"
  finish 1
fi
# A daemon that does not answer (the recipe restarting docker after configuring the nvidia
# runtime, a node still booting) is waited for, up to 10 minutes in all: the pull it broke
# does not count as an attempt.
daemon_waited=0
daemon_wait() {  # 0 once the runtime answers, 1 when the wait is used up
  local t0
  while ! "${rt[@]}" info >/dev/null 2>&1; do
    [ "$daemon_waited" -lt 600 ] || return 1
    echo "gpufleet-pull: $runtime does not answer; waiting for it" >&2
    t0=$(date +%s)
    sleep "$poll"
    daemon_waited=$((daemon_waited + $(date +%s) - t0))
  done
}
for ((n = 1; n <= attempts; n++)); do
  daemon_wait || true
  st_attempt=$n st_error=
  write_status
  if [ -n "$archive" ]; then
    watch_run "$log" "${rt[@]}" load -i "$archive"
    rc=$?
  elif ! registry_login 2>"$log"; then
    rc=1
  else
    if [ "$logged_in" = 1 ]; then
      watch_run "$log" "${rt_auth[@]}" pull "${pull_opts[@]}" "$image"
    else
      watch_run "$log" "${rt[@]}" pull "$image"
    fi
    rc=$?
  fi
  prior_bytes=$st_bytes
  if [ "$rc" = 0 ]; then
    if [ -n "$archive" ]; then
      st_digest=$(loaded_id "$log")
      # a fast local load can end between two polls: the archive's size is what it read
      sz=$(stat -c %s "$archive" 2>/dev/null || echo 0)
      [ "$sz" -gt "$st_bytes" ] && st_bytes=$sz
    else
      st_digest=$(digest_of_image)
    fi
    if [ -n "$st_digest" ]; then
      st_state='done'
      finish 0
    fi
    st_error="$runtime reported success but no digest was found for $label"
  elif [ "$rc" = 124 ]; then
    st_error="no new bytes for ${stall}s (attempt $n of $attempts): stopped"
  else
    st_error="$(tail -n 3 "$log" | tr '\n' ' ')"
    if [ -n "$archive" ] && [ "$runtime" = docker ] && [ "$transport" = oci-archive ]; then
      st_error="$st_error (docker's classic image store loads only docker-archive tarballs with a manifest.json; the containerd image store or podman load OCI archives)"
    fi
  fi
  if [ "$rc" != 0 ] && [ "$daemon_waited" -lt 600 ] && ! "${rt[@]}" info >/dev/null 2>&1; then
    echo "gpufleet-pull: $runtime went away during attempt $n (restarted?): not counted" >&2
    prior_bytes=0
    n=$((n - 1))
    continue
  fi
  echo "gpufleet-pull: attempt $n of $attempts failed: $st_error" >&2
  [ "$n" -lt "$attempts" ] && sleep "$(( n < 5 ? n * 2 : 10 ))"
done
st_state=failed
finish 1
