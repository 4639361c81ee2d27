"""A fake `podman` for the sandbox: containers are process groups on this machine plus state files.

What is faked: the container runtime only. `run -d` starts the container's command (`sleep
infinity`) in a new session and records the container (name, labels, image, argv, PATH) in a
state file; `exec` runs the command in a new session too, in the `-w` folder, with a
container's environment (PATH, HOME, the `-e` pairs: nothing of the SSH session's), and waits
for it; like a real runtime, killing the exec client leaves that process running. `rm -f`
kills every process group of the container and forgets it; `ps --filter label=K=V`, `inspect`,
`info` and `--version` answer from the state. Every run/exec/rm is logged as a JSON line.
What is real: the sandbox's sshd nodes, gpufleet's SSH sessions, the commands themselves.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

SCRIPT = r"""#!PYTHON
import json, os, signal, subprocess, sys, time
STATE = STATE_DIR
os.makedirs(STATE, exist_ok=True)


def log(**kw):
    with open(os.path.join(STATE, "calls.log"), "a") as f:
        f.write(json.dumps(kw) + "\n")


def path(name, ext=".json"):
    return os.path.join(STATE, name + ext)


def load(name):
    try:
        with open(path(name)) as f:
            return json.load(f)
    except OSError:
        return None


def groups(name):
    try:
        with open(path(name, ".pgids")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def track(name, pid):
    with open(path(name, ".pgids"), "a") as f:
        f.write(f"{pid}\n")


def alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except OSError:
        return False


VALUELESS = {"-d", "--detach", "--rm", "--init", "-i", "-t", "--interactive", "-f", "-a", "-q"}


def split(args):
    opts, rest = [], list(args)
    while rest and rest[0].startswith("-"):
        a = rest.pop(0)
        if a in VALUELESS or "=" in a:
            opts.append((a, None))
        else:
            opts.append((a, rest.pop(0)))
    return opts, rest


def run(args):
    opts, rest = split(args)
    name = dict(opts).get("--name")
    if load(name) is not None:
        sys.exit(f"Error: the container name {name!r} is already in use")
    image, cmd = rest[0], rest[1:]
    labels = dict(v.split("=", 1) for k, v in opts if k == "--label")
    st = dict(name=name, image=image, labels=labels, argv=sys.argv[1:],
              workdir=dict(opts).get("-w"), path=os.environ.get("PATH", ""))
    p = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    track(name, p.pid)
    with open(path(name), "w") as f:
        json.dump(st, f)
    log(op="run", name=name, argv=sys.argv[1:], pgid=p.pid)
    print(name + "-id")


def exec_(args):
    opts, rest = split(args)
    name, cmd = rest[0], rest[1:]
    st = load(name)
    if st is None:
        sys.exit(f"Error: no container with name or ID {name!r} found")
    env = {"PATH": st["path"], "HOME": os.environ.get("HOME", "/"), "container": "fake"}
    env.update(v.split("=", 1) for k, v in opts if k in ("-e", "--env"))
    wd = dict(opts).get("-w") or st["workdir"]
    # pipes, relayed by this client: as with a real runtime, the process inside holds none
    # of the client's own descriptors (the SSH session's), so a killed client ends the session
    p = subprocess.Popen(cmd, cwd=wd, env=env, start_new_session=True, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    track(name, p.pid)
    log(op="exec", name=name, workdir=wd, cmd=cmd, pgid=p.pid, client=os.getpid())

    def copy(src, dst, close=False):
        try:
            while True:
                b = os.read(src.fileno(), 65536)
                if not b:
                    break
                dst.write(b)
                dst.flush()
        except OSError:
            pass
        if close:
            with __import__("contextlib").suppress(OSError):
                dst.close()

    import threading
    ts = [threading.Thread(target=copy, args=(p.stdout, sys.stdout.buffer)),
          threading.Thread(target=copy, args=(p.stderr, sys.stderr.buffer))]
    threading.Thread(target=copy, args=(sys.stdin.buffer, p.stdin, True), daemon=True).start()
    for t in ts:
        t.start()
    code = p.wait()
    for t in ts:
        t.join()
    sys.exit(code if code >= 0 else 128 - code)


def rm(args):
    opts, names = split(args)
    for name in names:
        for g in groups(name):
            with __import__("contextlib").suppress(OSError):
                os.killpg(g, signal.SIGTERM)
        until = time.time() + 3
        while any(alive(g) for g in groups(name)) and time.time() < until:
            time.sleep(0.05)
        for g in groups(name):
            with __import__("contextlib").suppress(OSError):
                os.killpg(g, signal.SIGKILL)
        for ext in (".json", ".pgids"):
            with __import__("contextlib").suppress(OSError):
                os.unlink(path(name, ext))
        log(op="rm", name=name)


def ps(args):
    opts, _ = split(args)
    want = [v.split("=", 1)[1] for k, v in opts if k == "--filter" and v.startswith("label=")]
    for f in sorted(os.listdir(STATE)):
        if f.endswith(".json"):
            st = load(f[:-5])
            if st and all(st["labels"].get(k) == v for k, _, v in (w.partition("=") for w in want)):
                print(st["name"])


a = sys.argv[1:]
if a[:1] == ["--version"]:
    print("podman version 0.0.0-fake")
elif a[:1] == ["info"]:
    print("fake runtime")
elif a[:1] == ["run"]:
    run(a[1:])
elif a[:1] == ["exec"]:
    exec_(a[1:])
elif a[:1] == ["rm"]:
    rm(a[1:])
elif a[:1] == ["ps"]:
    ps(a[1:])
elif a[:1] == ["inspect"]:
    st = load(a[-1])
    print(json.dumps([st] if st else []))
    sys.exit(0 if st else 125)
else:
    sys.exit(f"fake podman: {a[:1]} is not faked")
"""


def install(bin_dir: Path, state_dir: Path) -> Path:
    """Write the fake `podman` into bin_dir; its containers' state goes under state_dir."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / "podman"
    exe.write_text(
        SCRIPT.replace("#!PYTHON", f"#!{sys.executable}").replace("STATE_DIR", repr(str(state_dir)))
    )
    exe.chmod(0o755)
    return exe


def calls(state_dir: Path) -> list[dict]:
    log = state_dir / "calls.log"
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def containers(state_dir: Path) -> list[str]:
    """Names of the containers the fake still holds."""
    return sorted(p.stem for p in state_dir.glob("*.json")) if state_dir.exists() else []


def live_groups(state_dir: Path) -> list[int]:
    """Process groups ever started in a fake container (removed ones' too) still alive."""
    out = []
    for g in (c["pgid"] for c in calls(state_dir) if "pgid" in c):
        with contextlib.suppress(OSError):
            os.killpg(g, 0)
            out.append(g)
    return out


def kill_all(state_dir: Path) -> None:
    """Teardown: nothing the fake started outlives the test, whatever the test did."""
    groups = live_groups(state_dir)
    for g in groups:
        with contextlib.suppress(OSError):
            os.killpg(g, signal.SIGKILL)
    time.sleep(0.1 if groups else 0)
