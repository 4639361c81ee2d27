"""`run_job` with a recovery spec on a new sandbox cluster, printed as the CLI prints a run
(`gpufleet: ...` progress, `[node-K] line`) and last `RECORD {json}`; for tests, until the
CLI's --recover flags exist (the cli helper's)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpufleet.components.clusterspec import ClusterSpec, RecoverySpec
from gpufleet.core.errors import GpufleetError
from gpufleet.jobs.launch import LaunchOptions
from gpufleet.jobs.run import JobRequest, run_job


def main(cfg: dict) -> int:
    def progress(message: str) -> None:
        print(f"gpufleet: {message}", flush=True)

    def stream(node: str, line: str, is_err: bool) -> None:
        print(f"[{node}] {line}", flush=True)

    ended: list[dict] = []
    req = JobRequest(
        launch=LaunchOptions(
            launcher=cfg.get("launcher", "torchrun"),
            command=cfg["command"],
            nproc_per_node=1,
            run_id=cfg["run_id"],
        ),
        workdir=Path(cfg["workdir"]),
        spec=ClusterSpec(name=cfg["name"], cloud="local", nodes=cfg["nodes"]),
        recovery=RecoverySpec(**cfg["recovery"]) if cfg.get("recovery") else None,
    )
    try:
        code = run_job(req, progress, stream, lambda rec: ended.append(rec.as_dict()))
    except GpufleetError as e:
        print(f"error: {e}", flush=True)
        code = e.exit_code
    for rec in ended:
        print("RECORD " + json.dumps(rec), flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
