"""A fake docker/podman for tests of scripts/container_pull.sh: records, emulates, never runs.

Installed on PATH as `docker` and `podman` (sh wrappers; FAKE_PROG names which). State lives in
$FAKE_RT: calls.jsonl (argv of every call), logins.jsonl (user, host, the password read from
stdin), images.json (what is "present"), plan.json (what each pull/load does, consumed in
order: "ok", "stall" (writes a little, then hangs), "fail", "restart" (the daemon goes away
for 3 calls)), storage/ (`info`'s root;
docker's downloads grow storage/tmp, podman's a container_images_storage* folder in TMPDIR).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(os.environ["FAKE_RT"])
DIGEST = "sha256:" + "d" * 64
IMAGE_ID = "e" * 64


def record(name: str, doc: dict) -> None:
    with (ROOT / name).open("a") as f:
        f.write(json.dumps(doc) + "\n")


def images() -> dict:
    p = ROOT / "images.json"
    return json.loads(p.read_text()) if p.exists() else {}


def next_step() -> str:
    p = ROOT / "plan.json"
    plan = json.loads(p.read_text()) if p.exists() else []
    step = plan.pop(0) if plan else "ok"
    p.write_text(json.dumps(plan))
    return step


def grow(chunks: int, delay: float) -> None:
    """Write a "download" where the real runtime does: docker into <DockerRootDir>/tmp (its
    root is storage/ here), podman into a container_images_storage* folder under TMPDIR."""
    if os.environ["FAKE_PROG"] == "docker":
        store = ROOT / "storage" / "tmp"
    else:
        store = (
            Path(os.environ.get("TMPDIR", "/var/tmp")) / f"container_images_storage{os.getpid()}"
        )
    store.mkdir(parents=True, exist_ok=True)
    for _ in range(chunks):
        (store / f"blob-{time.time_ns()}").write_bytes(b"x" * 100_000)
        time.sleep(delay)


def option(args: list[str], name: str) -> str | None:
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i : i + 2]
        return value
    return None


def main() -> int:
    prog = os.environ["FAKE_PROG"]
    args = sys.argv[1:]
    record("calls.jsonl", {"prog": prog, "argv": sys.argv[1:]})
    config = option(args, "--config")  # docker's client config folder (a global option)
    cmd = args.pop(0)
    down = ROOT / "daemon_down"  # "restart": the daemon answers nothing for N more calls
    if down.exists():
        left = int(down.read_text())
        if left <= 0:
            down.unlink()
        else:
            down.write_text(str(left - 1))
            print(
                "Cannot connect to the Docker daemon. Is the docker daemon running?",
                file=sys.stderr,
            )
            return 1
    if cmd == "info":
        print(ROOT / "storage")
        return 0
    if cmd == "login":
        authfile = option(args, "--authfile") or str(Path(config or ROOT) / "config.json")
        user = option(args, "--username")
        assert "--password-stdin" in args, "the password must come on stdin"
        secret = sys.stdin.read().strip()
        record("logins.jsonl", {"prog": prog, "user": user, "host": args[-1], "secret": secret})
        Path(authfile).write_text(json.dumps({"auths": {args[-1]: {"auth": secret}}}))
        print("Login Succeeded")
        return 0
    if cmd == "pull":
        authfile = option(args, "--authfile") or str(Path(config or ROOT) / "config.json")
        ref = args[-1]
        if (ROOT / "require_login").exists() and not Path(authfile).exists():
            print(f"Error: {ref}: unauthorized", file=sys.stderr)
            return 1
        step = next_step()
        if step == "fail":
            print(f"Error: pulling {ref}: connection reset by peer", file=sys.stderr)
            return 1
        if step == "restart":  # the daemon restarts under the pull: down for 3 more calls
            grow(1, 0)
            down.write_text("3")
            print("error during connect: unexpected EOF", file=sys.stderr)
            return 1
        if step == "stall":
            grow(1, 0)
            time.sleep(3600)
        grow(5, 0.15)
        imgs = images()
        imgs[ref] = {"digest": DIGEST, "id": IMAGE_ID}
        (ROOT / "images.json").write_text(json.dumps(imgs))
        return 0
    if cmd == "load":
        path = option(args, "-i")
        step = next_step()
        if step == "fail":
            print(
                "Error: payload does not match any of the supported image formats", file=sys.stderr
            )
            return 1
        assert path and Path(path).is_file()
        grow(3, 0.1)
        imgs = images()
        imgs["localhost/test:latest"] = {"digest": "", "id": IMAGE_ID}
        (ROOT / "images.json").write_text(json.dumps(imgs))
        print("Loaded image: localhost/test:latest")
        return 0
    if cmd == "image" and args[0] == "inspect":
        fmt = option(args, "--format") or ""
        ref = args[-1]
        found = images().get(ref) or next(
            (v for v in images().values() if "sha256:" + v["id"] == ref), None
        )
        if found is None:
            print(f"Error: no such image {ref}", file=sys.stderr)
            return 1
        if ".Digest" in fmt:
            print(found["digest"])
        elif "RepoDigests" in fmt:  # as docker writes them: Docker Hub's in the familiar form
            repo = ref.rsplit(":", 1)[0].removeprefix("docker.io/").removeprefix("library/")
            print("other.example/mirror@sha256:" + "0" * 64)
            print(repo + "@" + found["digest"])
        elif ".Id" in fmt:
            print(found["id"] if prog == "podman" else "sha256:" + found["id"])
        else:
            print("[{}]")
        return 0
    print(f"fake {prog}: unknown command {cmd}", file=sys.stderr)
    return 125


if __name__ == "__main__":
    sys.exit(main())
