"""A measurement server's life, as library/vllm_variant runs it: started beside or instead of the configured
server, stopped (the configured one restored, its downtime reported), forgotten at teardown.

What the measurement server is (its places, its launch composed from the configured one, where it fits, the
record of a configured server it stopped) is vllm.variant; it is started, proven ready and stopped by the same
code as the configured server (vllm.start, vllm.process). These are the front's start_measurement,
stop_measurement and forget_measurement (dflash_host.vllm).
"""

from __future__ import annotations

import os
import time

from dflash_host.host.files import atomic_write, read_json
from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError
from dflash_host.vllm.process import ProcessServer, server_for
from dflash_host.vllm.records import dump, load_launch, paths, remove_tool_file
from dflash_host.vllm.render import check_places
from dflash_host.vllm.start import start
from dflash_host.vllm.variant import (
    STEM,
    check_variant,
    choose_placement,
    copy_env_file,
    drafter_max_k,
    drop_configured_record,
    measurement_launch,
    read_configured_record,
    variant_launch,
    variant_places,
    write_configured_record,
)


def _configured(args: dict) -> tuple:
    """(the configured server's paths, its rendered launch, the measurement server's paths), places checked."""
    cp = paths(args["pidfile"])
    configured = load_launch(cp)
    p = variant_places(args["pidfile"], args["log"])
    if os.path.abspath(p["pidfile"]) == os.path.abspath(cp["pidfile"]) or os.path.abspath(p["log"]) == os.path.abspath(args["log"]):
        raise ModuleError(f"the configured server's pidfile or log ({args['pidfile']}, {args['log']}) has the measurement "
                          f"server's name ({STEM}.*); rename vllm_pidfile / vllm_log so the two never share files")
    root = args["root"] or configured.get("root")
    check_places(p, p["log"], root)
    managed_path(p["configured"], "vllm_pidfile", root)
    return cp, configured, p


def refuse_cluster_node(configured: dict) -> None:
    """A cluster node's measurement server would start one host's share of a multi-node launch and wait for
    nodes that never come: a cluster's baseline needs every node restarted without the drafter."""
    cluster = configured.get("cluster")
    if cluster:
        raise ModuleError(
            f"the server here is node rank {cluster.get('node_rank')} of a {cluster.get('nnodes')}-node serving cluster: "
            f"a measurement without the drafter (serving-bench --compare-baseline, tune, the speed gate) needs every "
            f"node and is not supported for clusters yet; measure the cluster as it serves with `invoke serving-bench "
            f"--host <its head>` (no --compare-baseline)")


def _drop_variant(p: dict, ctx: Context) -> dict | None:
    """Stop a measurement server left running (whole tree, by its pidfile) and remove its records."""
    launch = measurement_launch(p)
    stopped = ProcessServer(launch or {"mode": "process"}, p).stop(ctx, float((launch or {}).get("stop_grace_s") or 30))
    for path, kind in ((p["running"], "running"), (p["pidfile"], "pidfile"), (p["env"], "env")):
        remove_tool_file(path, kind, False)
    if launch is not None:
        os.unlink(p["launch"])
    return stopped


def _stop_configured(configured: dict, cp: dict, p: dict, now: dict, ctx: Context) -> dict:
    """Stop the configured server for a measurement: recorded first, so that it is restored whatever happens."""
    running = read_json(cp["running"]) or {}
    if running.get("fingerprint") != configured.get("fingerprint"):
        raise ModuleError("the configured vLLM server runs an older launch than the rendered one, so stopping and "
                          "restoring it would change it; nothing was stopped. Run `invoke provision` first, then measure")
    write_configured_record(p, now["pid"], configured.get("fingerprint"))
    ctx.say(f"vLLM: stopping the configured server (PID {now['pid']}) for the measurement")
    stopped = server_for(configured, cp).stop(ctx, float(configured.get("stop_grace_s") or 30))
    if configured.get("mode") != "systemd":
        remove_tool_file(cp["pidfile"], "pidfile", False)
    remove_tool_file(cp["running"], "running", False)
    return stopped or {}


def restore_configured(args: dict, ctx: Context) -> dict | None:
    """Start the configured server again if a measurement stopped it, prove it serves, report the downtime."""
    cp, configured, p = _configured(args)
    record = read_configured_record(p)
    if record is None:
        return None
    server = server_for(configured, cp)
    now = server.inspect()
    if now["alive"]:
        drop_configured_record(p)
        return {"pid": now["pid"], "downtime_s": None, "msg": f"the configured server runs already (PID {now['pid']})"}
    ctx.say("vLLM: restarting the configured server after the measurement")
    figures = start(configured, cp, ctx, server)
    drop_configured_record(p)
    downtime = round(float(figures["ready_at"]) - float(record["stopped_at"]), 1)
    changed = "" if record.get("fingerprint") == configured.get("fingerprint") else " (its launch was re-rendered meanwhile)"
    return {"pid": figures["pid"], "previous_pid": record.get("configured_pid"), "downtime_s": downtime,
            "ready_s": figures["ready_s"], "acceptance_rate": figures.get("acceptance_rate"),
            "msg": f"restarted the configured server{changed}: PID {figures['pid']}, serving again after {downtime} s down"}


def _start_variant(launch: dict, p: dict, args: dict, ctx: Context, stopped_configured: bool) -> dict:
    """Start the measurement server; when it fails, the configured server is restored before the error."""
    copy_env_file(p)
    atomic_write(p["launch"], dump(launch), mode=0o600)
    try:
        return start(launch, p, ctx, ProcessServer(launch, p))
    except ModuleError as exc:
        os.unlink(p["launch"])
        remove_tool_file(p["env"], "env", False)
        note = ""
        if stopped_configured:
            restored = restore_configured(args, ctx)
            note = f" The configured server was restored: {restored['msg']}." if restored else ""
        raise ModuleError(f"the measurement server ({launch['variant']}) did not start: {exc.msg}{note}", **exc.data) from None


def start_measurement(args: dict, ctx: Context) -> dict:
    """state started: the measurement server runs the variant (beside the configured server, or instead of it,
    recorded), proven ready."""
    cp, configured, p = _configured(args)
    refuse_cluster_node(configured)
    spec = configured.get("speculative")
    max_k = drafter_max_k(spec)
    k = check_variant(args["variant"], spec, max_k)
    port = int(configured["port"]) + int(args["port_offset"])
    if not 1 <= port <= 65535:
        raise ModuleError(f"vllm_port + speed_port_offset is {port}, outside 1-65535; choose another speed_port_offset")
    launch = variant_launch(configured, p, k, port)
    base = {"variant": launch["variant"], "k": k, "max_k": max_k, "port": port, "host": configured.get("host"),
            "served_model_name": configured.get("served_model_name"), "pidfile": p["pidfile"], "log": p["log"]}
    if ctx.check:
        return {**base, "changed": True, "msg": f"would start a measurement server ({launch['variant']}) on port {port}"}
    _drop_variant(p, ctx)
    now = server_for(configured, cp).inspect()
    record = read_configured_record(p)
    if record is not None and now["alive"]:
        drop_configured_record(p)  # started again meanwhile (a provision): nothing is left to restore
        record = None
    if record is not None:
        placement, why = "instead", f"the configured server stays stopped from an earlier measurement (PID {record['configured_pid']})"
    else:
        placement, why = choose_placement(args["placement"], configured, now, args["nvidia_smi"])
    stopped_now = placement == "instead" and record is None and now["alive"]
    if stopped_now:
        _stop_configured(configured, cp, p, now, ctx)
    t0 = time.monotonic()
    figures = _start_variant(launch, p, args, ctx, stopped_now or record is not None)
    base.update(placement=placement, placement_reason=why, configured_pid=now["pid"],
                configured_stopped=placement == "instead" and (now["alive"] or record is not None),
                pid=figures["pid"], ready_s=figures["ready_s"], start_s=round(time.monotonic() - t0, 1),
                acceptance_rate=figures.get("acceptance_rate"))
    where = "beside the configured server" if placement == "beside" else "instead of the configured server (stopped)"
    return {**base, "changed": True,
            "msg": f"measurement server ({launch['variant']}) PID {figures['pid']} ready on port {port} {where}: {why}"}


def stop_measurement(args: dict, ctx: Context) -> dict:
    """state stopped: the measurement server is gone and (restore) the configured server is back as it was."""
    cp, configured, p = _configured(args)
    record = read_configured_record(p)
    if ctx.check:
        return {"changed": True, "msg": "would stop the measurement server" + (" and restore the configured one" if record else "")}
    stopped = _drop_variant(p, ctx)
    restored = restore_configured(args, ctx) if args["restore"] else None
    parts = [f"stopped the measurement server ({len((stopped or {}).get('stopped', []))} process(es))" if stopped
             else "no measurement server was running"]
    if restored:
        parts.append(restored["msg"])
    elif record is not None:
        parts.append("the configured server stays stopped for the next measurement (restore: false)")
    return {"changed": bool(stopped or restored), "msg": "; ".join(parts), "restored": restored,
            "downtime_s": (restored or {}).get("downtime_s"), "configured_pid": (restored or {}).get("pid")}


def forget_measurement(args: dict, ctx: Context) -> dict:
    """Teardown: stop a measurement server left running and forget what it stopped (nothing is restarted)."""
    p = variant_places(args["pidfile"], args["log"])
    managed_path(p["pidfile"], "vllm_pidfile", args["root"])
    record = read_configured_record(p)
    if ctx.check:
        return {"changed": record is not None or os.path.lexists(p["pidfile"]), "msg": "would stop any measurement server"}
    stopped = _drop_variant(p, ctx)
    if record is not None:
        drop_configured_record(p)
    return {"changed": bool(stopped) or record is not None,
            "msg": "stopped the measurement server" if stopped else "no measurement server was running"}
