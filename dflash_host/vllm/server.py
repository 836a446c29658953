"""The managed server's life, as library/vllm_server runs it: rendered, running (proven), stopped or absent.

render writes the launch (vllm.launch resolves it, vllm.render writes what differs); ensure_running keeps a
running server that is the rendered launch and proven healthy, else stops what runs and starts the launch
(vllm.start), proving it ready; stop stops the whole tree and removes what the tool wrote beside the pidfile.
The task module's docstring says what each state means to the play; these are the front's render,
ensure_running and stop (dflash_host.vllm).
"""

from __future__ import annotations

import os
from typing import Any

from dflash_host.host import systemd
from dflash_host.models.config import is_multimodal_target
from dflash_host.module import Context, ModuleError
from dflash_host.vllm.cluster import is_headless
from dflash_host.vllm.features import schedule_where_supported
from dflash_host.vllm.launch import resolve
from dflash_host.vllm.log import check_log
from dflash_host.vllm.probe import endpoint
from dflash_host.vllm.process import ServerFailed, server_for
from dflash_host.vllm.ready import verify_headless, verify_running
from dflash_host.vllm.records import (
    files_to_remove,
    launch_state,
    load_launch,
    paths,
    read_launch,
    record_teardown,
    remove_tool_file,
)
from dflash_host.vllm.render import (
    check_places,
    check_settings,
    files_wanted,
    launch_record,
    models_to_come,
    refuse_foreign_targets,
    refuse_leaving_cluster,
    render_files,
)
from dflash_host.vllm.start import start
from dflash_host.vllm.systemd_unit import SERVICE_NAME, choose_mode, unsupervised_note


def _named(args: dict) -> dict:
    """The unit's name: vllm_service_name, else dflash-vllm."""
    args["service_name"] = args.get("service_name") or SERVICE_NAME
    return args


# --------------------------------------------------------------------------- rendered


def render(args: dict, ctx: Context, table: dict) -> dict:
    """state rendered: validate the variables, resolve the launch (`table`: the task's ARGS, whose "flag" entries
    are vLLM's options) and write what differs (nothing in check mode)."""
    _named(args)
    check_settings(args, ctx)
    p = paths(args["pidfile"])
    refuse_leaving_cluster(p, args)  # before anything is written, in check mode too
    waiting = models_to_come(args) if ctx.check else None
    if waiting:
        return {"changed": True, "msg": waiting}
    spec = resolve(schedule_where_supported(args, ctx), is_multimodal_target, table)
    root = check_places(p, args["log"], args["root"])
    mode = choose_mode(args["use_systemd"], args["systemd_present"], os.geteuid() == 0)
    note = unsupervised_note(args["use_systemd"], args["systemd_present"], os.geteuid() == 0)
    if note:
        ctx.warn(note)
    launch, env_text, unit_text = launch_record(args, spec, p, mode, root)
    refuse_foreign_targets({p["launch"]: "launch", p["running"]: "running", p["env"]: "env", launch["unit_path"]: "unit"})
    return render_files(p, launch, spec, files_wanted(p, launch, env_text, unit_text), ctx)


# --------------------------------------------------------------------------- started, restarted


# (the result's key, its words): the checks acceptance_gate decides (vllm.smoke_checks: the prefix cache's too)
_GATED = (("acceptance", "acceptance"), ("prefix_cache", "prefix cache"))


def _apply_gate(out: dict, ctx: Context) -> None:
    for key, words in _GATED:
        verdict = out.get(f"{key}_verdict")
        if verdict == "fail":
            raise ModuleError(
                f"{words} gate failed: {out[f'{key}_msg']} (acceptance_gate: fail; the server keeps running)",
                **{f"{key}_failed": True},
                **{k: v for k, v in out.items() if k != "msg"},
            )
        if verdict == "warn":
            ctx.warn(out[f"{key}_msg"])


def _summary(out: dict, launch: dict) -> str:
    """PID, smoke and acceptance in a few words; a rate no min_acceptance_rate judges says so (the local random
    pair accepts ~0%, as expected: a bare 0.0% would read as a fault)."""
    if "headless_launch" in out:
        return f"PID {out.get('pid')}, headless: {out['headless_launch']}"
    rate = out.get("acceptance_rate")
    mal = out.get("mean_acceptance_length")
    acc = f", acceptance {rate:.1%}, mean acceptance length {mal:.2f}" if rate is not None else ""
    if acc and (launch.get("acceptance") or {}).get("min_rate") is None:
        acc += " (not judged: no min_acceptance_rate here)"
    if out.get("prefix_cache_hit_rate") is not None:
        acc += f", prefix cache hit {out['prefix_cache_hit_rate']:.0%} on a repeated prompt"
    if out.get("burst_requests"):
        acc += f", a burst of {out['burst_requests']} concurrent requests served"
    return f"PID {out.get('pid')}, smoke {out.get('smoke_tokens')} tokens{acc}"


NOTHING_RAN = "no server was running"  # replaced by start_reason where the play knows why (restart-server)


def _restart_reason(now: dict, fresh: bool) -> str:
    if now["alive"]:
        return "forced restart" if fresh else "the running server's launch differs from the rendered one"
    if now["procs"]:
        return f"leftovers of a dead server ({len(now['procs'])} process(es)) hold on"
    return NOTHING_RAN


def _keep_running(args: dict, ctx: Context, force: bool, launch: dict, p: dict, now: dict, fresh: bool,
                  started_at: Any) -> dict | str | None:
    """The result when the running server stays (verified, or left stale to the handler); else why it must
    restart (a string when it is unhealthy, None to let _restart_reason say)."""
    pid = now["pid"]
    if now["alive"] and fresh and force and args["only_if_stale"]:
        # the handler after a start task that already started (and proved) this very launch
        return {"changed": False, "pid": pid, "msg": f"vLLM (PID {pid}) already runs the rendered launch"}
    if now["alive"] and fresh and not force:
        try:
            if is_headless(launch):
                out = verify_headless(launch, pid, ctx, started_at)
            else:
                out = verify_running(launch, p, pid, ctx, started_at)
        except ServerFailed as exc:
            reason = f"the running server was unhealthy ({exc.what}{': ' + ' | '.join(exc.root) if exc.root else ''})"
            ctx.warn(reason + "; restarting it")
            return reason
        _apply_gate(out, ctx)
        doing = "running headless" if is_headless(launch) else "serving"
        out.update(changed=False, msg=f"vLLM is running with the rendered launch and {doing}: {_summary(out, launch)}")
        return out
    if now["alive"] and not fresh and not force and not args["restart_stale"]:
        return {"changed": False, "stale": True, "pid": pid,
                "msg": f"vLLM (PID {pid}) runs an older launch; the restart handler restarts it"}
    return None


def _restart(launch: dict, p: dict, ctx: Context, server: Any, reason: str, refused: list) -> dict:
    """Stop what runs (whole tree), drop its records, start the launch and prove it serves."""
    check_log(launch["log"], launch.get("root"))  # a foreign log stops us before the old server is stopped
    if ctx.check:
        return {"changed": True, "msg": f"would (re)start vLLM: {reason}", "reason": reason}
    stopped = server.stop(ctx, launch["stop_grace_s"])
    if launch["mode"] != "systemd":
        remove_tool_file(p["pidfile"], "pidfile", False)
    remove_tool_file(p["running"], "running", False)
    try:
        out = start(launch, p, ctx, server)
    except ModuleError as exc:
        raise _with_refused(exc, refused) from None
    out["reason"] = reason
    if stopped:
        out["stopped"] = stopped
    _apply_gate(out, ctx)
    out.update(changed=True, msg=f"started vLLM ({reason}), ready in {out['ready_s']} s: {_summary(out, launch)}")
    return out


def ensure_running(args: dict, ctx: Context, force: bool) -> dict:
    """states started (force false) and restarted (force true): the rendered launch runs, proven serving."""
    p = paths(args["pidfile"])
    if ctx.check and read_launch(p["launch"]) is None:
        return {"changed": True, "msg": "would start vLLM once its launch is rendered"}
    launch = load_launch(p)
    state = launch_state(launch, p, args.get("fingerprint"))
    now, fresh = state["now"], state["fresh"]
    kept = _keep_running(args, ctx, force, launch, p, now, fresh, state["running"].get("started_at"))
    if isinstance(kept, dict):
        return _with_endpoint(kept, launch)
    reason = kept or _restart_reason(now, fresh)
    if reason == NOTHING_RAN and args.get("start_reason"):
        reason = args["start_reason"]
    return _with_endpoint(_restart(launch, p, ctx, state["server"], reason, now.get("refused") or []), launch)


def _with_endpoint(out: dict, launch: dict) -> dict:
    """A running server's result says where clients reach it (`endpoint`: invoke provision prints it last)."""
    where = endpoint(launch)
    if out.get("pid") and not out.get("stale") and where:
        out["endpoint"] = where
    return out


def _with_refused(exc: ModuleError, refused: list) -> ModuleError:
    """A port taken after the pidfile's processes were refused as not ours: say why they were (they may
    well be the holder), so that the error explains itself."""
    if not refused or "owners" not in exc.data:
        return exc
    why = "; ".join(r["reason"] for r in refused)  # each reason names its PID
    return ModuleError(f"{exc.msg}. The processes the pidfile names were not proven ours, so none was stopped ({why})",
                       **exc.data, refused=refused)


# --------------------------------------------------------------------------- stopped, absent


def _left_alone(foreign: list, ctx: Context) -> None:
    if foreign:
        ctx.warn(
            f"left {', '.join(foreign)} alone: not written by dflash-provision (no start marker, header or "
            "launch record of the tool); remove by hand if unwanted"
        )


def _warn_reused_pid(now: dict, pidfile: str, removed: list, ctx: Context) -> None:
    """A pidfile whose PID now names another process is stale: say so as it goes, and that the process stays."""
    if pidfile not in removed:
        return
    verb = "would remove" if ctx.check else "removed"
    for entry in now.get("refused", []):
        if entry.get("top"):
            cmd = " ".join(entry.get("cmdline") or [])[:200] or "?"
            ctx.warn(
                f"{verb} the stale pidfile {pidfile}: its PID {entry['pid']} now belongs to another process "
                f"({cmd}; {entry['reason']}), which is left alone"
            )


def _stop_msg(ctx: Context, would_stop: bool, stopped: dict | None, removed: list) -> str:
    if ctx.check:
        files = f"remove {len(removed)} file(s)" if removed else ""
        if would_stop:
            return "would stop vLLM" + (f" and {files}" if files else "")
        return f"vLLM is not running; would {files}" if files else "vLLM is not running and nothing is left to remove"
    parts = []
    if stopped:
        parts.append(f"stopped vLLM ({len(stopped.get('stopped', []))} process(es) in {stopped.get('seconds', 0)} s)")
    if removed:
        parts.append(f"removed {', '.join(os.path.basename(f) for f in removed)}")
    return "; ".join(parts) if parts else "vLLM is not running and nothing is left to remove"


def stop(args: dict, ctx: Context, absent: bool) -> dict:
    """states stopped and absent: stop the whole tree; remove what the tool wrote beside the pidfile (and, with
    absent, the launch and unit)."""
    _named(args)
    p = paths(args["pidfile"])
    launch = rendered = read_launch(p["launch"])
    if launch is None:
        launch = {"mode": "process", "service_name": args["service_name"]}
    check_places(p, None, args["root"] or launch.get("root"))
    server = server_for(launch, p)
    now = server.inspect()
    foreign: list = []
    files = files_to_remove(p, launch, absent, foreign)
    would_stop = now["alive"] or bool(now["procs"])
    stopped = None
    if would_stop and not ctx.check:
        stopped = server.stop(ctx, float(launch.get("stop_grace_s", args["stop_grace_s"])))
    removed = [f for f, kind in files if remove_tool_file(f, kind, ctx.check, foreign)]
    recorded = absent and not ctx.check and rendered is not None and p["launch"] in removed
    if recorded and rendered is not None:
        record_teardown(p, rendered)
    _left_alone(foreign, ctx)
    _warn_reused_pid(now, p["pidfile"], removed, ctx)
    if absent and not ctx.check and launch.get("unit_path") in removed:
        systemd.unit_command("disable", launch["service_name"], check=False)
        systemd.systemctl(["daemon-reload"], check=False)
    out: dict[str, Any] = {"changed": (would_stop if ctx.check else bool(stopped)) or bool(removed),
           "msg": _stop_msg(ctx, would_stop, stopped, removed), "removed": removed, "foreign": foreign}
    if recorded:
        out["msg"] += f"; recorded the teardown in {os.path.basename(p['torndown'])} (invoke status: torn down)"
    if not ctx.check:
        out["stopped"] = stopped
    return out
