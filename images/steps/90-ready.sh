#!/usr/bin/env bash
# The readiness marker: the versions installed (and the pinned ones), as JSON, with each step's
# result and time from the runner's log. `gpufleet image bake` and the health check read it.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

# The first version number in stdin; callers add `|| true`: a missing tool is an empty value.
first_version() { grep -o '[0-9]\+\.[0-9]\+\(\.[0-9]\+\)*' | head -n1; }
export READY_DRIVER READY_CUDA READY_FM READY_CTK READY_DCGM READY_NCCL READY_LIBFABRIC READY_EFA READY_DOCKER
READY_DRIVER="$(loaded_driver)" || true
READY_CUDA="$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | first_version)" || true
READY_FM="$(nv-fabricmanager --version 2>/dev/null | first_version)" || true
READY_CTK="$(nvidia-ctk --version 2>/dev/null | first_version)" || true
READY_DCGM="$(dcgmi --version 2>/dev/null | first_version)" || true
READY_NCCL="$(nccl_version)"
READY_LIBFABRIC="$("$EFA_BIN/fi_info" --version 2>/dev/null | grep 'libfabric:' | first_version)" || true
READY_EFA="$(grep -i 'installer version' "$R/opt/amazon/efa_installed_packages" 2>/dev/null | first_version)" || true
READY_DOCKER="$(docker --version 2>/dev/null | first_version)" || true

out="$STATE/ready.json"
mkdir -p "$STATE"
python3 - "$R/var/log/gpufleet/steps.log" >"$out.tmp" <<'PY'
import json, os, sys

env = os.environ.get
steps = []
try:
    with open(sys.argv[1]) as f:
        for line in f:
            name, result, seconds = line.split()
            steps.append({"step": name, "result": result, "seconds": float(seconds)})
except FileNotFoundError:
    pass
try:  # which boot wrote this file: a reader can tell it from one a reboot left behind
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
except OSError:
    boot_id = ""
pins = [k for k in env("GPUFLEET_PINS", "").split(",") if k]
doc = {
    "cluster": env("GPUFLEET_CLUSTER", ""),
    "node": env("GPUFLEET_NODE", ""),
    "fabric": env("GPUFLEET_FABRIC", "none"),
    "version_set": env("GPUFLEET_VERSION_SET", ""),
    "driver": env("READY_DRIVER", ""),
    "cuda": env("READY_CUDA", ""),
    "fabric_manager": env("READY_FM", ""),
    "container_toolkit": env("READY_CTK", ""),
    "dcgm": env("READY_DCGM", ""),
    "nccl": env("READY_NCCL", ""),
    "libfabric": env("READY_LIBFABRIC", ""),
    "efa_installer": env("READY_EFA", ""),
    "docker": env("READY_DOCKER", ""),
    "pinned": {k: env("GPUFLEET_" + k.upper(), "") for k in pins},
    "boot_id": boot_id,
    "steps": steps,
    "seconds": round(sum(s["seconds"] for s in steps), 3),
}
print(json.dumps(doc, sort_keys=False))
PY
mv "$out.tmp" "$out"
log "ready: $out"
