"""Which flash-attn line a serving environment may hold, and which prebuilt wheel fits it (flash_attn).

vLLM brings its own `vllm_flash_attn`, so for vLLM alone no separate flash-attn is needed. A drafter or
extra package that imports `flash_attn` gets the 2.x line (`flash-attn<3`) on SM80-90 and `flash-attn-4`
on SM100+; below SM80 none may be there. The decision table (choose_flash_attn), the wheel choice by file
name (wheel_problems, choose_wheel), and what to change (plan_actions) are pure: no I/O; install_target
looks at the flash_attn_wheel argument's file or folder.
"""

from __future__ import annotations

import os
import re
import urllib.parse

from dflash_host.env.interpreter import parse_wheel_filename
from dflash_host.module import ModuleError

FA2, FA4 = "flash-attn", "flash-attn-4"
LINES = {"fa2": FA2, "fa4": FA4}
REQUIREMENT = {"fa2": "flash-attn<3", "fa4": "flash-attn-4"}
CRITICAL_IMPORTS = {"fa2": ["flash_attn", "flash_attn.ops.triton.rotary"], "fa4": ["flash_attn.cute"]}
_FA2_LOCAL = re.compile(r"cu(\d+)torch(\d+)\.(\d+)cxx11abi(TRUE|FALSE)", re.I)
VLLM_OWN = "vLLM brings its own vllm_flash_attn"


def parse_compute_capability(value: object) -> tuple | None:
    """(major, minor) of the lowest GPU, or None for no GPU. Accepts "9.0", 9.0, "sm_90", lists."""
    if isinstance(value, (list, tuple)):
        caps = [cap for cap in map(parse_compute_capability, value) if cap is not None]
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


def major_minor(version: str | None) -> tuple | None:
    m = re.match(r"^(\d+)\.(\d+)", str(version or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _no_line(out: dict, cc: tuple | None, sm: str, need_flash_attn: bool) -> dict:
    """Below SM80 (or no GPU): no flash-attn line may be there."""
    out["forbidden"] = [FA2, FA4]
    why = (
        "no GPU: flash-attn cannot run here"
        if cc is None
        else (
            f"{sm}: flash-attn 2.x needs SM80+ (Turing has a separate flash-attention-turing project) and "
            f"flash-attn-4 asserts SM 8.x or newer"
        )
    )
    out["reason"] = f"{why}; none may be installed ({VLLM_OWN}, other code falls back to torch sdpa)"
    if need_flash_attn:
        out["error"] = (
            f"flash_attn_needed is true but {sm} has no flash-attn line ({why}); set flash_attn_needed "
            f"false (vLLM and the DFlash drafter run without it) or use an Ampere-or-newer GPU"
        )
    return out


def _torch_problem(torch_version: str | None, cuda_version: str | None) -> str | None:
    """Why the environment's torch cannot take a flash-attn line, or None."""
    if not torch_version:
        return "torch is not installed in the serving environment; build it with vLLM first"
    if not cuda_version:
        return (
            f"torch {torch_version} in the serving environment is a CPU build; flash-attn "
            f"needs a CUDA build (vllm_flavor cuda)"
        )
    return None


def _fa2_era(out: dict, sm: str, torch_version: str | None, cuda_version: str | None, need: bool) -> None:
    """SM80-90: the 2.x line when needed; flash-attn-4 never."""
    out["forbidden"] = [FA4]
    out["allowed"] = [FA2]
    fa4_why = (
        f"flash-attn-4 is for SM100+: on {sm} it installs a flash_attn without flash_attn.ops and "
        f"vLLM fails at start-up with a missing-module error"
    )
    if need:
        out.update(line="fa2", requirement=REQUIREMENT["fa2"])
        out["reason"] = (
            f"{sm}: a package that imports flash_attn gets the 2.x line (flash-attn<3, built "
            f"for SM80/SM90, torch {torch_version}, CUDA {cuda_version}); {fa4_why}"
        )
    else:
        out["reason"] = (
            f"{sm}: {VLLM_OWN} (FA2 on SM8x, FA3 on SM90), so no separate flash-attn is "
            f"needed; a working 2.x may stay; {fa4_why}"
        )


def _fa4_era(out: dict, sm: str, torch_version: str | None, cuda_version: str | None, need: bool) -> None:
    """SM100+: flash-attn-4 when needed; a working install of either line may stay."""
    out["allowed"] = [FA2, FA4]
    if need:
        out.update(line="fa4", requirement=REQUIREMENT["fa4"])
        out["reason"] = (
            f"{sm} (Blackwell or newer): a package that imports flash_attn gets flash-attn-4 "
            f"(CuTeDSL, flash_attn.cute; torch {torch_version}, CUDA {cuda_version})"
        )
    else:
        out["reason"] = f"{sm}: {VLLM_OWN} (FA4 on SM10x), so no separate flash-attn is needed; working installs may stay"


def choose_flash_attn(
    compute_capability: object, torch_version: str | None, cuda_version: str | None, need_flash_attn: bool
) -> dict:
    """Which flash-attn line the environment needs, and which distributions must not be there.

    Returns {"line": None|"fa2"|"fa4", "requirement", "forbidden": [...], "allowed": [...], "reason",
    "error": None or why the need cannot be met}. No I/O.
    """
    cc = parse_compute_capability(compute_capability)
    sm = f"SM {cc[0]}.{cc[1]}" if cc else "no GPU"
    out: dict = {
        "line": None,
        "requirement": None,
        "forbidden": [],
        "allowed": [],
        "reason": "",
        "error": None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
    }
    if cc is None or cc < (8, 0):
        return _no_line(out, cc, sm, need_flash_attn)
    era = _fa2_era if cc < (10, 0) else _fa4_era
    era(out, sm, torch_version, cuda_version, need_flash_attn)
    torch_problem = _torch_problem(torch_version, cuda_version) if need_flash_attn else None
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


def _fa2_build_problems(version: str, env: dict) -> list:
    """Why a 2.x wheel's build tag (+cuXXtorchX.Ycxx11abiBOOL) does not fit the environment's torch."""
    tags = fa2_wheel_tags(version)
    if not tags:
        return ["no +cuXXtorchX.Ycxx11abiBOOL build tag in its version"]
    problems = []
    tv, cv = major_minor(env.get("torch_version")), major_minor(env.get("cuda_version"))
    if tv and tags["torch"] != tv:
        problems.append(f"built for torch {tags['torch'][0]}.{tags['torch'][1]}, the environment has {env['torch_version']}")
    if cv and tags["cuda_major"] != cv[0]:
        problems.append(f"built for CUDA {tags['cuda_major']}, torch uses CUDA {env['cuda_version']}")
    if env.get("cxx11_abi") is not None and tags["cxx11_abi"] != env["cxx11_abi"]:
        problems.append(f"built with cxx11abi {str(tags['cxx11_abi']).upper()}, torch uses {str(env['cxx11_abi']).upper()}")
    return problems


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
    base = major_minor(w["version"])
    if line == "fa2" and (not base or base[0] != 2):
        problems.append(f"version {w['version']} is not 2.x")
    pys = w["py"].split(".")
    if env["python_tag"] not in pys and not any(p in ("py3", "py2.py3") for p in pys) and w["abi"] != "abi3":
        problems.append(f"built for {w['py']}, the environment runs {env['python_tag']}")
    plats = w["plat"].split(".")
    if "any" not in plats and not any(p.endswith(env["machine"]) for p in plats):
        problems.append(f"built for {w['plat']}, the host is {env['machine']}")
    if line == "fa2":
        problems += _fa2_build_problems(w["version"], env)
    return problems


def _version_key(filename: str) -> tuple:
    """A wheel file's version as numbers, for the newest first (its +local build tag left out)."""
    w = parse_wheel_filename(filename)
    return tuple(int(x) for x in re.findall(r"\d+", w["version"].split("+", 1)[0])[:4]) if w else ()


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
    return max(fits, key=_version_key), rejected


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
        if v is not None and (major_minor(v) or (0,))[0] != 2:
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
    """The modules that must import once the environment is pinned, in order."""
    mods = list(CRITICAL_IMPORTS.get(decision["line"], []))
    if decision["line"] is None and FA2 in installed_after:
        mods.append("flash_attn")  # an allowed 2.x must at least import (a broken one breaks transformers)
    if has_vllm:
        mods.append("vllm")
    return list(dict.fromkeys(mods + list(extra)))


def _misfit(what: str, problems: list, env: dict) -> ModuleError:
    return ModuleError(
        f"flash_attn_wheel {what} does not fit this environment: {'; '.join(problems)}; "
        f"choose the file for torch {env['torch_version']}, CUDA {env['cuda_version']}, "
        f"{env['python_tag']}, cxx11abi {env.get('cxx11_abi')}"
    )


def _wheel_from_url(wheel: str, line: str, env: dict) -> tuple:
    name = urllib.parse.unquote(os.path.basename(urllib.parse.urlparse(wheel).path))
    if not name.endswith(".whl"):
        raise ModuleError(
            f"flash_attn_wheel {wheel} is a URL but not of a .whl file; give the URL of the wheel "
            f"itself (e.g. a GitHub release asset) or a wheelhouse folder on the host"
        )
    problems = wheel_problems(name, line, env)
    if problems:
        raise _misfit(name, problems, env)
    return wheel, [], name


def _wheel_from_folder(path: str, line: str, env: dict) -> tuple:
    best, rejected = choose_wheel(sorted(os.listdir(path)), line, env)
    if not best:
        seen = "; ".join(f"{n}: {', '.join(p)}" for n, p in rejected.items()) or "no wheels of this line"
        raise ModuleError(
            f"no wheel in {path} fits this environment for {LINES[line]} (torch {env['torch_version']}, CUDA "
            f"{env['cuda_version']}, {env['python_tag']}, {env['machine']}, cxx11abi {env.get('cxx11_abi')}): "
            f"{seen}; add the matching prebuilt wheel (named like flash_attn-2.8.3+cu12torch2.6cxx11abiTRUE-"
            f"cp311-cp311-linux_x86_64.whl) or set flash_attn_allow_build true to compile it"
        )
    return os.path.join(path, best), ["--find-links", path], best


def install_target(wheel: str | None, line: str, env: dict) -> tuple:
    """(requirement or file/URL to install, extra source args, description) for the flash_attn_wheel
    argument: none (the index), a URL of a .whl, a wheel file, or a folder to choose the best fitting one from."""
    if not wheel:
        return REQUIREMENT[line], [], f"{REQUIREMENT[line]} from the index"
    if "://" in wheel and not wheel.startswith("file://"):
        return _wheel_from_url(wheel, line, env)
    path = os.path.expanduser(wheel[len("file://") :] if wheel.startswith("file://") else wheel)
    if os.path.isdir(path):
        return _wheel_from_folder(path, line, env)
    if not os.path.isfile(path):
        raise ModuleError(
            f"flash_attn_wheel {path} does not exist on this host; give a URL, a wheel file or a "
            f"wheelhouse folder that the role pushed"
        )
    problems = wheel_problems(os.path.basename(path), line, env)
    if problems:
        raise _misfit(path, problems, env)
    return path, [], os.path.basename(path)
