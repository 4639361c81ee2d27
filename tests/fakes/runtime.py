"""The one fake container runtime for the tests (`docker` and `podman` on PATH): see install().

What it fakes, per command (state under one folder; per node under nodes/$GPUFLEET_NODE, "local"
when unset):
- containers: `run -d` starts the command in a new session (a process group) and records name,
  labels, image, argv, PATH; `exec` runs in a new session in the `-w` folder with a container's
  environment (PATH, HOME, `container=fake`, the `-e` pairs) and relays its pipes (a killed
  client leaves the process running, as with a real runtime); `rm -f` kills the container's
  process groups; `ps --filter label=K=V`, `inspect` answer from the state.
- images, for scripts/container_pull.sh: `info --format TEMPLATE` evaluates `{{.A.B}}` /
  `{{json .A}}` against a document whose Store.GraphRoot and DockerRootDir are the node's
  storage/ folder (info.json in the state folder is merged over it: set_info()); `pull`
  "downloads" `chunks` x `chunk` bytes every `delay` s (settings.json) where the real runtime
  downloads: docker into <DockerRootDir>/tmp (the folder `info` names), podman into a
  container_images_storage<pid> folder under $TMPDIR (default /var/tmp); settings' grow_into
  ({prog: info field path}) sends them to the folder that field names instead; the files stay
  (a real runtime removes each blob when complete); then it records the image; `load -i FILE`
  copies the archive into that download folder and records its path and sha256; `image
  inspect --format` prints .Digest, RepoDigests (docker's form) or .Id; `login --username U
  --password-stdin HOST` records the password read from stdin (logins.jsonl) and writes the
  auth file (--authfile, or docker's --config folder). plan.json (global, or the node's) lists
  what each pull/load does, in order: "ok", "stall" (one chunk, then hangs), "fail", "restart",
  "slowload" (a load writing only into the store, silently, for ~4 s)
  (one chunk, then the daemon goes away: every call fails with "Cannot connect to the Docker
  daemon" for 3 more calls, state in the node's daemon_down file); a node's
  `fail` file fails every pull/load with its text; `require_login` refuses pulls without a
  login; the node's `digest`/`id` files override DIGEST/IMAGE_ID; `rmi` forgets images.
Every call is logged (calls.log, JSON lines: op, prog, node, argv, and per op more fields).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

DIGEST = "sha256:" + "d" * 64  # a pulled image's repo digest
IMAGE_ID = "e" * 64  # an image's id (config digest), as podman prints it
SETTINGS = {"chunks": 3, "chunk": 1_000_000, "delay": 0.2}

SCRIPT = r"""#!PYTHON
import contextlib, hashlib, json, os, shutil, signal, subprocess, sys, threading, time
STATE = STATE_DIR
PROG = os.path.basename(sys.argv[0])
NODE = os.environ.get("GPUFLEET_NODE") or "local"
DIGEST, IMAGE_ID, SETTINGS = DEFAULTS
NODE_DIR = os.path.join(STATE, "nodes", NODE)
STORAGE = os.path.join(NODE_DIR, "storage")
os.makedirs(STORAGE, exist_ok=True)


def log(into="calls.log", **kw):
    with open(os.path.join(STATE, into), "a") as f:
        f.write(json.dumps(dict(prog=PROG, node=NODE, **kw)) + "\n")


def read(name, default=None, node_first=True):
    for d in ([NODE_DIR] if node_first else []) + [STATE]:
        p = os.path.join(d, name)
        if os.path.exists(p):
            with open(p) as f:
                return f.read()
    return default


def settings():
    s = dict(SETTINGS)
    s.update(json.loads(read("settings.json", "{}")))
    return s


BOXES = os.path.join(STATE, "containers")
os.makedirs(BOXES, exist_ok=True)


def path(name, ext=".json"):
    return os.path.join(BOXES, name + ext)


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


VALUELESS = {"-d", "--detach", "--rm", "--init", "-i", "-t", "--interactive", "-f", "-a", "-q",
             "--password-stdin"}


def split(args):
    opts, rest = [], list(args)
    while rest and rest[0].startswith("-"):
        a = rest.pop(0)
        if a in VALUELESS or "=" in a:
            opts.append((a, None))
        else:
            opts.append((a, rest.pop(0) if rest else None))
    return opts, rest


# --- images ---------------------------------------------------------------------------------
def images():
    p = os.path.join(NODE_DIR, "images.json")
    if not os.path.exists(p):
        return {}
    with open(p) as f:
        return json.load(f)


def save_image(ref, **rec):
    imgs = images()
    imgs[ref] = rec
    with open(os.path.join(NODE_DIR, "images.json.tmp"), "w") as f:
        json.dump(imgs, f)
    os.replace(os.path.join(NODE_DIR, "images.json.tmp"), os.path.join(NODE_DIR, "images.json"))


def next_step():
    for d in (NODE_DIR, STATE):
        p = os.path.join(d, "plan.json")
        if os.path.exists(p):
            with open(p) as f:
                plan = json.load(f)
            step = plan.pop(0) if plan else "ok"
            with open(p, "w") as f:
                json.dump(plan, f)
            return step
    return "ok"


def grow_dir():
    # where a real runtime downloads: docker (classic store) into <DockerRootDir>/tmp, podman
    # (containers/image) into container_images_storage* under image_copy_tmp_dir ($TMPDIR,
    # default /var/tmp); settings "grow_into": {prog: "Field.Path"} names an `info` field instead
    key = settings().get("grow_into", {}).get(PROG)
    if key:
        v = info_doc()
        for k in key.split("."):
            v = v[k]
    elif PROG == "docker":
        v = os.path.join(info_doc()["DockerRootDir"], "tmp")
    else:
        v = os.path.join(os.environ.get("TMPDIR") or "/var/tmp",
                         f"container_images_storage{os.getpid()}")
    os.makedirs(v, exist_ok=True)
    return v


def grow(chunks, chunk, delay, name):
    with open(os.path.join(grow_dir(), name), "ab") as f:
        for i in range(chunks):
            if i:
                time.sleep(delay)
            f.write(b"x" * chunk)
            f.flush()


def event(what):
    with open(os.path.join(STATE, "events"), "a") as f:
        f.write(f"{what} {NODE}\n")


def lookup(ref):
    imgs = images()
    if ref in imgs:
        return imgs[ref]
    return next((v for v in imgs.values() if "sha256:" + v["id"] == ref or v["id"] == ref), None)


def digest():
    return (read("digest", DIGEST) or DIGEST).strip()


def image_id():
    return (read("id", IMAGE_ID) or IMAGE_ID).strip().removeprefix("sha256:")


def option(args, name):
    if name in args:
        i = args.index(name)
        value = args[i + 1]
        del args[i : i + 2]
        return value
    return None


def info_doc():
    doc = {"Store": {"GraphRoot": STORAGE}, "DockerRootDir": STORAGE,
           "Host": {"Security": {"Rootless": False}}, "CDISpecDirs": [], "SecurityOptions": []}

    def merge(a, b):
        for k, v in b.items():
            if isinstance(v, dict) and isinstance(a.get(k), dict):
                merge(a[k], v)
            else:
                a[k] = v
    merge(doc, json.loads((read("info.json", "{}", node_first=False) or "{}")
                          .replace("$STORAGE", STORAGE).replace("$NODE_DIR", NODE_DIR)))
    return doc


def template(fmt, doc):
    # the Go templates the callers use: {{.A.B}} and {{json .A}}
    body = fmt.strip()
    if not (body.startswith("{{") and body.endswith("}}")):
        sys.exit(f"fake {PROG}: template {fmt!r} is not faked")
    expr = body[2:-2].strip()
    as_json = expr.startswith("json ")
    v = doc
    for key in expr.removeprefix("json ").strip().lstrip(".").split("."):
        if not isinstance(v, dict) or key not in v:
            sys.exit(f"Error: template: can't evaluate field {key}")
        v = v[key]
    return json.dumps(v) if as_json else (str(v).lower() if isinstance(v, bool) else str(v))


def info(args, config):
    fmt = option(args, "--format") or option(args, "-f")
    log(op="info", argv=sys.argv[1:])
    print(template(fmt, info_doc()) if fmt else f"fake {PROG} (storage {STORAGE})")


def login(args, config):
    authfile = option(args, "--authfile") or os.path.join(config or NODE_DIR, "config.json")
    user = option(args, "--username") or option(args, "-u")
    log(op="login", argv=sys.argv[1:])
    if "--password-stdin" not in args:
        sys.exit(f"fake {PROG}: the password must come on stdin (--password-stdin)")
    secret = sys.stdin.read().strip()
    host = args[-1]
    log("logins.jsonl", user=user, host=host, secret=secret)
    with open(authfile, "w") as f:
        json.dump({"auths": {host: {"auth": secret}}}, f)
    print("Login Succeeded")


def pull(args, config):
    authfile = option(args, "--authfile") or os.path.join(config or NODE_DIR, "config.json")
    ref = args[-1]
    log(op="pull", argv=sys.argv[1:], image=ref)
    if read("require_login") is not None and not os.path.exists(authfile):
        sys.exit(f"Error: {ref}: unauthorized")
    fail = read("fail")
    step = next_step()
    if fail is not None or step == "fail":
        sys.exit(fail.strip() if fail is not None else
                 f"Error: pulling {ref}: connection reset by peer")
    s = settings()
    blob = hashlib.sha256(ref.encode()).hexdigest()[:16] + f"-{time.time_ns()}"
    event("start")
    if step == "restart":  # the daemon restarts under the pull: down for 3 more calls
        grow(1, s["chunk"], 0, blob)
        with open(DOWN, "w") as f:
            f.write("3")
        sys.exit("error during connect: unexpected EOF")
    if step == "stall":
        grow(1, s["chunk"], 0, blob)
        time.sleep(3600)
    grow(s["chunks"], s["chunk"], s["delay"], blob)
    save_image(ref, digest=digest(), id=image_id())
    event("end")


def load_(args, config):
    src = option(args, "-i") or option(args, "--input")
    log(op="load", argv=sys.argv[1:], path=src)
    fail = read("fail")
    step = next_step()
    if fail is not None or step == "fail":
        sys.exit(fail.strip() if fail is not None else
                 "Error: payload does not match any of the supported image formats")
    if not src or not os.path.isfile(src):
        sys.exit(f"Error: open {src}: no such file or directory")
    h = hashlib.sha256()
    with open(src, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    if step == "slowload":
        # as a real load does: layers written into the store itself (GraphRoot /
        # DockerRootDir), nothing in a download folder and no output, for several polls
        layers = os.path.join(info_doc()["Store"]["GraphRoot"], "layers")
        os.makedirs(layers, exist_ok=True)
        with open(os.path.join(layers, f"load-{time.time_ns()}"), "ab") as out:
            for _ in range(6):
                time.sleep(0.7)
                out.write(b"x" * 100_000)
                out.flush()
    else:
        shutil.copyfile(src, os.path.join(grow_dir(), f"load-{time.time_ns()}"))
    log("loaded.jsonl", path=src, sha256=h.hexdigest())
    save_image("localhost/test:latest", digest="", id=image_id())
    print("Loaded image: localhost/test:latest")


def image(args, config):
    if args[:1] != ["inspect"]:
        sys.exit(f"fake {PROG}: image {args[:1]} is not faked")
    args = args[1:]
    fmt = option(args, "--format") or option(args, "-f") or ""
    ref = args[-1]
    log(op="image inspect", argv=sys.argv[1:])
    found = lookup(ref)
    if found is None:
        sys.exit(f"Error: no such image {ref}")
    if ".Digest" in fmt:
        print(found["digest"])
    elif "RepoDigests" in fmt:  # as docker writes them: Docker Hub's in the familiar form
        repo = ref.rsplit(":", 1)[0].removeprefix("docker.io/").removeprefix("library/")
        print("other.example/mirror@sha256:" + "0" * 64)
        print(repo + "@" + found["digest"])
    elif ".Id" in fmt:
        print(found["id"] if PROG == "podman" else "sha256:" + found["id"])
    else:
        print(json.dumps([found]))


# --- containers -----------------------------------------------------------------------------
def run(args):
    opts, rest = split(args)
    name = dict(opts).get("--name")
    if load(name) is not None:
        sys.exit(f"Error: the container name {name!r} is already in use")
    image, cmd = rest[0], rest[1:]
    labels = dict(v.split("=", 1) for k, v in opts if k == "--label")
    present = lookup(image) is not None
    st = dict(name=name, image=image, labels=labels, argv=sys.argv[1:], node=NODE,
              workdir=dict(opts).get("-w"), path=os.environ.get("PATH", ""), present=present)
    p = subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    track(name, p.pid)
    with open(path(name), "w") as f:
        json.dump(st, f)
    log(op="run", name=name, argv=sys.argv[1:], pgid=p.pid, image=image, present=present)
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
            with contextlib.suppress(OSError):
                dst.close()

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
            with contextlib.suppress(OSError):
                os.killpg(g, signal.SIGTERM)
        until = time.time() + 3
        while any(alive(g) for g in groups(name)) and time.time() < until:
            time.sleep(0.05)
        for g in groups(name):
            with contextlib.suppress(OSError):
                os.killpg(g, signal.SIGKILL)
        for ext in (".json", ".pgids"):
            with contextlib.suppress(OSError):
                os.unlink(path(name, ext))
        log(op="rm", name=name, argv=sys.argv[1:])


def ps(args):
    opts, _ = split(args)
    want = [v.split("=", 1)[1] for k, v in opts if k == "--filter" and v.startswith("label=")]
    for f in sorted(os.listdir(BOXES)):
        if f.endswith(".json"):
            st = load(f[:-5])
            if st and all(st["labels"].get(k) == v for k, _, v in (w.partition("=") for w in want)):
                print(st["name"])


a = sys.argv[1:]
config = None
if a[:1] == ["--config"]:  # docker's client config folder (a global option)
    config, a = a[1], a[2:]
cmd, rest = (a[0], a[1:]) if a else ("", [])
DOWN = os.path.join(NODE_DIR, "daemon_down")  # "restart": the daemon answers nothing for N calls
if os.path.exists(DOWN) and cmd != "--version":
    with open(DOWN) as f:
        left = int(f.read() or 0)
    if left <= 0:
        os.unlink(DOWN)
    else:
        with open(DOWN, "w") as f:
            f.write(str(left - 1))
        log(op=cmd, argv=sys.argv[1:], down=True)
        sys.exit("Cannot connect to the Docker daemon. Is the docker daemon running?")
if cmd == "--version":
    print(f"{PROG} version 0.0.0-fake")
elif cmd in ("info", "login", "pull", "image"):
    {"info": info, "login": login, "pull": pull, "image": image}[cmd](rest, config)
elif cmd == "load":
    load_(rest, config)
elif cmd == "rmi":  # forget the images named (by name or id)
    log(op="rmi", argv=sys.argv[1:])
    gone = [a for a in rest if not a.startswith("-")]
    kept = {k: v for k, v in images().items()
            if k not in gone and "sha256:" + v["id"] not in gone and v["id"] not in gone}
    with open(os.path.join(NODE_DIR, "images.json"), "w") as f:
        json.dump(kept, f)
elif cmd == "run":
    run(rest)
elif cmd == "exec":
    exec_(rest)
elif cmd == "rm":
    rm(rest)
elif cmd == "ps":
    ps(rest)
elif cmd == "inspect":
    st = load(rest[-1]) if rest else None
    print(json.dumps([st] if st else []))
    sys.exit(0 if st else 125)
else:
    sys.exit(f"fake {PROG}: {a[:1]} is not faked")
"""


def install(bin_dir: Path, state_dir: Path, names: tuple[str, ...] = ("docker", "podman")) -> Path:
    """Write the fake as each of `names` into bin_dir; its state goes under state_dir."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    text = (
        SCRIPT.replace("#!PYTHON", f"#!{sys.executable}")
        .replace("STATE_DIR", repr(str(state_dir)))
        .replace("DEFAULTS", repr((DIGEST, IMAGE_ID, SETTINGS)))
    )
    for name in names:
        exe = bin_dir / name
        exe.write_text(text)
        exe.chmod(0o755)
    os.chmod(bin_dir, 0o755)
    return bin_dir


def node_dir(state_dir: Path, node: str = "local") -> Path:
    """A node's folder in the fake's state (its storage/, images, plan, digest, id, fail)."""
    d = state_dir / "nodes" / node
    d.mkdir(parents=True, exist_ok=True)
    return d


def configure(state_dir: Path, **settings: object) -> None:
    """Pull pacing: chunks, chunk (bytes), delay (s); grow_into: {prog: info field path}."""
    (state_dir / "settings.json").write_text(json.dumps(settings))


def set_info(state_dir: Path, doc: dict) -> None:
    """Merged over `info`'s document ($STORAGE / $NODE_DIR: the node's folders)."""
    (state_dir / "info.json").write_text(json.dumps(doc))


def add_image(state_dir: Path, ref: str, node: str = "local") -> None:
    """The image as a finished pull leaves it in the node's store (DIGEST, IMAGE_ID)."""
    p = node_dir(state_dir, node) / "images.json"
    imgs = json.loads(p.read_text()) if p.exists() else {}
    imgs[ref] = {"digest": DIGEST, "id": IMAGE_ID}
    p.write_text(json.dumps(imgs))


def plan(state_dir: Path, *steps: str, node: str | None = None) -> None:
    where = state_dir if node is None else node_dir(state_dir, node)
    (where / "plan.json").write_text(json.dumps(list(steps)))


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines()] if path.exists() else []


def calls(state_dir: Path) -> list[dict]:
    return _jsonl(state_dir / "calls.log")


def logins(state_dir: Path) -> list[dict]:
    return _jsonl(state_dir / "logins.jsonl")


def loaded(state_dir: Path) -> list[dict]:
    return _jsonl(state_dir / "loaded.jsonl")


def events(state_dir: Path) -> list[str]:
    p = state_dir / "events"
    return p.read_text().splitlines() if p.exists() else []


def containers(state_dir: Path) -> list[str]:
    """Names of the containers the fake still holds."""
    return sorted(p.stem for p in (state_dir / "containers").glob("*.json"))


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
