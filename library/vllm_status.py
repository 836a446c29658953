"""Report the managed vLLM server's state for `invoke status`: read-only, changes nothing.

Running or not (pidfile proven by PID + start time + command line, or the systemd unit), PID, port,
uptime, /health, the served model, the acceptance rate and mean acceptance length since the server
started (from /metrics), and the GPU memory its processes hold (nvidia-smi; null without a driver).

| argument | type | default | meaning |
|---|---|---|---|
| pidfile | path | required | the server's pidfile (the launch files sit beside it) |
| nvidia_smi | str | nvidia-smi | the nvidia-smi command |
| timeout_s | float | 2 | per HTTP probe |
"""

from __future__ import annotations

if __name__ == "__main__":  # library/ holds files named like stdlib modules (copy.py): stdlib first
    import os as _os
    import sys as _sys

    _here = _os.path.dirname(_os.path.abspath(__file__))
    _sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here] + [_here]

import time  # noqa: E402

import _gpu  # noqa: E402
import _vllm_metrics as M  # noqa: E402
import _vllm_probe as P  # noqa: E402
import psutil  # noqa: E402
from _common import Context, ModuleError, main  # noqa: E402
from vllm_server import _load_json, paths, read_env, server_for  # noqa: E402

ARGS = {
    "pidfile": {"type": "path", "required": True},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "timeout_s": {"type": "float", "default": 2.0},
}


def gpu_used_mib(cmd: str, pids: set) -> int | None:
    """MiB of GPU memory held by `pids` (compute-apps list); None without a usable driver."""
    try:
        apps = _gpu.query_compute_apps(cmd)
    except _gpu.NoDriver:
        return None
    return sum(a.get("used_mib") or 0 for a in apps if a.get("pid") in pids)


def run(args: dict, ctx: Context) -> dict:
    p = paths(args["pidfile"])
    launch = _load_json(p["launch"])
    out = {
        "changed": False,
        "running": False,
        "pid": None,
        "port": None,
        "uptime_s": None,
        "health": None,
        "served_model": None,
        "acceptance_rate": None,
        "mean_acceptance_length": None,
        "gpu_used_mib": None,
    }
    if launch is None:
        out["msg"] = f"no vLLM launch rendered here ({p['launch']} is missing): not provisioned"
        return out
    out["port"] = launch.get("port")
    out["mode"] = launch.get("mode")
    out["log"] = launch.get("log")
    try:
        now = server_for(launch, p).inspect()
    except ModuleError as exc:
        out["msg"] = exc.msg
        return out
    pids = {x.pid for x in now.get("procs", [])}
    if now["alive"]:
        out["running"], out["pid"] = True, now["pid"]
        pids.add(now["pid"])
        try:
            out["uptime_s"] = round(time.time() - psutil.Process(now["pid"]).create_time(), 1)
            pids |= {c.pid for c in psutil.Process(now["pid"]).children(recursive=True)}
        except psutil.Error:
            pass
    elif pids:
        out["leftovers"] = sorted(pids)
    url = P.base_url(launch.get("host", "127.0.0.1"), launch.get("port", 8000))
    health = P.request(url + "/health", timeout=args["timeout_s"])
    out["health"] = "ok" if health.status == 200 else health.describe()
    if health.status == 200:
        api_key = read_env(p).get("VLLM_API_KEY")
        names = P.served_models(P.request(url + "/v1/models", timeout=args["timeout_s"], api_key=api_key))
        out["served_model"] = names[0] if len(names) == 1 else (names or None)
        metrics = P.request(url + "/metrics", timeout=args["timeout_s"])
        if metrics.status == 200:
            figures = M.acceptance(M.spec_decode_counters(metrics.body.decode("utf-8", "replace")))
            out["acceptance_rate"] = figures["acceptance_rate"]
            out["mean_acceptance_length"] = figures["mean_acceptance_length"]
            out["draft_tokens"] = figures["draft_tokens"]
    if pids:
        out["gpu_used_mib"] = gpu_used_mib(args["nvidia_smi"], pids)
    running = _load_json(p["running"]) or {}
    out["stale"] = bool(out["running"] and running.get("fingerprint") != launch.get("fingerprint"))
    if out["running"]:
        rate = out["acceptance_rate"]
        acc = f", acceptance {rate:.1%}" if rate is not None else ""
        out["msg"] = f"vLLM PID {out['pid']} on port {out['port']}, up {out['uptime_s']} s, health {out['health']}{acc}"
    else:
        out["msg"] = f"vLLM is not running (port {out['port']}: health {out['health']})"
    return out


if __name__ == "__main__":
    main(ARGS, run)
