"""A measurement server: the configured vLLM launch with one variation, for the speed figures.

The variation is the drafter: none (the baseline, `--speculative-config` dropped) or another
`num_speculative_tokens` k. Everything else (target, flags, environment, secrets) is the configured
server's own launch (NAME.launch.json and NAME.env beside vllm_pidfile, as vllm_server rendered them),
so the two servers differ only in what is measured. It listens on vllm_port + an offset, runs as a
process session with its own pidfile (`vllm-speed.pid` beside the configured one) and log
(`vllm-speed.log` beside the configured one), started, proven ready and stopped by the same code as
the configured server (vllm.start, vllm.process; its life: vllm.measurement).

Where two servers do not fit (GPU: every GPU the server uses must have gpu_memory_utilization x total
free, as vLLM demands at start; CPU: available RAM must hold the configured server's RSS again, with a
margin), the configured server is stopped for the measurement and restarted and verified afterwards
(placement `instead`); a record (`vllm-speed.configured.json`) keeps what was stopped until it is back.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any

import psutil

from dflash_host.host.files import atomic_write, read_bytes, read_json
from dflash_host.host.gpus import NoDriver, query_compute_apps, query_gpus
from dflash_host.models.config import config_or_none
from dflash_host.models.drafter_choices import choose_block_size
from dflash_host.module import ModuleError
from dflash_host.vllm.launch import compose_argv
from dflash_host.vllm.records import dump, is_tool_file, paths, read_launch

STEM = "vllm-speed"
CONFIGURED_RECORD_KEYS = {"tool", "configured_stopped", "configured_pid"}
TOOL_TAG = "dflash-provision speed measurement"
RAM_MARGIN = 1.25  # a second CPU server needs its RSS once more, plus this share for its peaks
VLLM_DEFAULT_UTILIZATION = 0.9


def variant_places(configured_pidfile: str, configured_log: str) -> dict:
    """Paths of the measurement server: its pidfile, records and log beside the configured server's."""
    folder = os.path.dirname(os.path.abspath(configured_pidfile))
    p = paths(os.path.join(folder, f"{STEM}.pid"))  # its env file: a 0600 copy of the configured one (secrets)
    p["configured_env"] = paths(configured_pidfile)["env"]
    p["configured"] = os.path.join(folder, f"{STEM}.configured.json")
    p["log"] = os.path.join(os.path.dirname(os.path.abspath(configured_log)), f"{STEM}.log")
    return p


def drafter_max_k(speculative: dict | None) -> int | None:
    """block_size - 1 of the configured drafter (its config.json), the largest k DFlash drafts; None without."""
    if not speculative or not speculative.get("model"):
        return None
    size = choose_block_size(None, config_or_none(speculative["model"]) or {})[0]
    return int(size) - 1 if isinstance(size, int) and size > 1 else None


def check_variant(variant: Any, speculative: dict | None, max_k: int | None) -> int | None:
    """The k to serve (None: the baseline); a clear error for a k the drafter cannot draft."""
    if variant in (None, "", "baseline", "none"):
        return None
    try:
        k = int(variant)
    except (TypeError, ValueError):
        raise ModuleError(f"variant is {variant!r}; give `baseline` (no drafter) or a whole number k of speculative tokens")
    if not speculative:
        raise ModuleError(f"variant k={k} needs a drafter, and the configured launch serves none (drafter_model is null); "
                          "measure the baseline only, or set drafter_model and provision")
    if k < 1 or (max_k is not None and k > max_k):
        raise ModuleError(f"variant k={k} is outside 1..{max_k} (the drafter's block_size - 1, from its config.json); "
                          f"choose k from 1 to {max_k}")
    return k


def variant_argv(configured: dict, port: int, k: int | None) -> list:
    """The configured launch composed again (vllm.launch.compose_argv, from the record's argv parts) with the
    variant's port, and its speculative config at k or none (the baseline); nothing is read back out of argv."""
    parts, spec = configured.get("argv_parts"), configured.get("speculative")
    if not isinstance(parts, dict) or not isinstance(configured.get("values"), dict):
        raise ModuleError("the configured server's launch record predates this version of the tool (it has no argv "
                          "parts or checked values); run provision again (vllm_server rewrites it), then measure")
    return compose_argv(parts, configured.get("host"), port, {**spec, "num_speculative_tokens": k} if k is not None and spec else None)


def variant_launch(configured: dict, p: dict, k: int | None, port: int) -> dict:
    """The launch record of the measurement server (process mode, its own log), from the configured one."""
    spec = configured.get("speculative")
    argv = variant_argv(configured, port, k)
    digest = hashlib.sha256(json.dumps([argv, configured.get("fingerprint")]).encode()).hexdigest()
    expected = list(configured.get("expected_architectures") or [])
    if k is None and spec and len(expected) > 1:
        expected = expected[:1]  # the drafter's architecture is not loaded without it
    launch = {key: configured.get(key) for key in ("env", "api_key_set", "root", "workdir", "host", "served_model_name",
                                                   "models", "readiness_timeout_s", "stop_grace_s", "smoke", "acceptance")}
    launch.update(fingerprint=digest, launch_id=digest[:12], mode="process", argv=argv, env_file=p["env"], log=p["log"],
                  log_keep=2, port=port, speculative={**spec, "num_speculative_tokens": k} if k is not None and spec else None,
                  expected_architectures=expected, service_name=None, unit_path=None, variant="baseline" if k is None else k,
                  of_fingerprint=configured.get("fingerprint"), tool=TOOL_TAG)
    return launch


# --------------------------------------------------------------------------- room for a second server


def _used_gpus(configured: dict, gpus: list) -> list:
    """The GPUs the server uses: CUDA_VISIBLE_DEVICES of its environment, else the first tensor_parallel_size."""
    tp = int(configured["values"].get("tensor_parallel_size") or 1)
    visible = str((configured.get("env") or {}).get("CUDA_VISIBLE_DEVICES") or "").strip()
    if visible:
        wanted = [v.strip() for v in visible.split(",") if v.strip()][:tp]
        return [g for g in gpus if str(g["index"]) in wanted or g.get("uuid") in wanted]
    return sorted(gpus, key=lambda g: g["index"])[:tp]


def gpu_room(configured: dict, nvidia_smi: str | None, server_pids: set) -> tuple | None:
    """(fits, why) on a GPU host whose server holds GPU memory; None where the server uses no GPU."""
    try:
        apps = query_compute_apps(nvidia_smi)
        gpus = query_gpus(nvidia_smi)
    except NoDriver:
        return None
    if server_pids and not any(a.get("pid") in server_pids for a in apps):
        return None
    util = float(configured["values"].get("gpu_memory_utilization") or VLLM_DEFAULT_UTILIZATION)
    short = []
    for g in _used_gpus(configured, gpus):
        total, used = g.get("memory_total_mib") or 0, g.get("memory_used_mib") or 0
        if total - used < util * total:
            short.append(f"GPU {g['index']}: {total - used} MiB free, {util * total:.0f} MiB needed")
    if short:
        return False, (f"a second server needs gpu_memory_utilization {util:g} x each GPU's memory free "
                       f"({'; '.join(short)})")
    return True, f"every GPU it uses has {util:g} x its memory free"


def ram_room(procs: list) -> tuple:
    """(fits, why) for a CPU server: available RAM against the configured server's RSS (all its processes)."""
    rss = 0
    for proc in procs:
        try:
            rss += proc.memory_info().rss
        except psutil.Error:
            continue
    available = psutil.virtual_memory().available
    need = int(rss * RAM_MARGIN)
    mib = 2**20
    if available < need:
        return False, f"{available // mib} MiB RAM available, {need // mib} MiB needed (the server's RSS x {RAM_MARGIN:g})"
    return True, f"{available // mib} MiB RAM available, {need // mib} MiB needed (the server's RSS x {RAM_MARGIN:g})"


def choose_placement(wanted: str, configured: dict, now: dict, nvidia_smi: str | None) -> tuple:
    """("beside" | "instead", why): a second server where memory allows (or where asked), else instead."""
    if not now["alive"]:
        return "beside", "the configured server is not running: nothing to share memory with"
    if wanted in ("beside", "instead"):
        return wanted, f"speed_variant_placement: {wanted}"
    pids = {x.pid for x in now.get("procs", [])} | {now["pid"]}
    room = gpu_room(configured, nvidia_smi, pids)
    if room is None:
        room = ram_room([x for x in now.get("procs", [])] or [psutil.Process(now["pid"])])
    return ("beside" if room[0] else "instead"), room[1]


# --------------------------------------------------------------------------- the record of a stopped server


def read_configured_record(p: dict) -> dict | None:
    """What a measurement stopped (and must restore); None when nothing is recorded."""
    data = read_json(p["configured"])
    if data is not None and CONFIGURED_RECORD_KEYS <= set(data) and data.get("tool") == TOOL_TAG:
        return data
    if os.path.lexists(p["configured"]):
        raise ModuleError(f"{p['configured']} exists but is not the tool's record of a stopped server; it was left "
                          "untouched. Move it away and run again")
    return None


def write_configured_record(p: dict, pid: int | None, fingerprint: str | None) -> dict:
    record = {"tool": TOOL_TAG, "configured_stopped": True, "configured_pid": pid, "fingerprint": fingerprint,
              "stopped_at": time.time()}
    atomic_write(p["configured"], dump(record), mode=0o644)
    return record


def drop_configured_record(p: dict) -> None:
    if read_configured_record(p) is not None:
        os.unlink(p["configured"])


def copy_env_file(p: dict) -> None:
    """The measurement server's environment file: the configured one's bytes (the tool's header, secrets), 0600."""
    data = read_bytes(p["configured_env"]) or b""
    if not is_tool_file(p["configured_env"], "env"):
        raise ModuleError(f"{p['configured_env']} is missing or not the tool's; run `invoke provision` first")
    if os.path.lexists(p["env"]) and not is_tool_file(p["env"], "env"):
        raise ModuleError(f"{p['env']} exists but was not written by dflash-provision; it was left untouched. Move it away")
    atomic_write(p["env"], data, mode=0o600)


def measurement_launch(p: dict) -> dict | None:
    """The measurement server's launch record (read_launch) when it is one (the tool's tag), else None."""
    launch = read_launch(p["launch"])
    return launch if launch is not None and launch.get("tool") == TOOL_TAG else None
