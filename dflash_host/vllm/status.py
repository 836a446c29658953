"""The managed server's state for `invoke status` (library/vllm_status): read-only, changes nothing.

The running process (by its pidfile or unit), its HTTP API (/health, /v1/models, /metrics: the acceptance since
it started), the GPU memory its processes hold, its log, a cluster node's workers; a server that dies while it
is read is reported as not running; a host torn down (teardown's record) or never provisioned says which. The
task module's docstring has the details; this is the front's status (dflash_host.vllm).
"""

from __future__ import annotations

import os
import time

import psutil

from dflash_host.host.files import read_json
from dflash_host.host.gpus import NoDriver, query_compute_apps
from dflash_host.module import ModuleError
from dflash_host.vllm.cluster import is_headless, local_workers, missing_workers
from dflash_host.vllm.metrics import acceptance, spec_decode_counters
from dflash_host.vllm.probe import base_url, endpoint, request, served_models
from dflash_host.vllm.process import server_for
from dflash_host.vllm.records import paths, read_env, read_launch, torn_down

EXIT_WAIT_S = 0.5


def gpu_used_mib(cmd: str, pids: set) -> int | None:
    """MiB of GPU memory held by `pids` (compute-apps list); None without a usable driver."""
    try:
        apps = query_compute_apps(cmd)
    except NoDriver:
        return None
    return sum(a.get("used_mib") or 0 for a in apps if a.get("pid") in pids)


def log_state(path: str | None, pids: set) -> dict:
    """Is the server's log where the launch says? When it was deleted under the running server, the
    server still writes to the deleted file: name the descriptor it can be copied from until a restart."""
    if not path:
        return {"log_present": None}
    if os.path.exists(path):
        return {"log_present": True}
    gone = path + " (deleted)"
    for pid in sorted(pids):
        folder = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{folder}/{fd}") == gone:
                    return {"log_present": False, "log_open_fd": f"{folder}/{fd}"}
            except OSError:
                continue
    return {"log_present": False, "log_open_fd": None}


def _same_live(pid: int, started: float | None) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and (started is None or proc.create_time() == started)
    except psutil.Error:
        return False


def still_running(pid: int, started: float | None, probes_failed: bool) -> bool:
    """The process read at the start is still the same live process (not gone, not a zombie, not reused).

    After a failed probe the process may be mid-exit (its sockets close before it turns into a zombie),
    so then it is watched for up to EXIT_WAIT_S before it counts as running."""
    deadline = time.monotonic() + (EXIT_WAIT_S if probes_failed else 0.0)
    while _same_live(pid, started):
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.05)
    return False


def _log_note(out: dict) -> str:
    if out.get("log_present") is not False:
        return ""
    if out.get("log_open_fd"):
        return (
            f"; its log {out['log']} was deleted: the server still writes to the deleted file, "
            f"readable as {out['log_open_fd']} until it stops"
        )
    return f"; its log {out['log']} is missing (deleted); the next start writes a new one"


def _processes(now: dict, out: dict) -> tuple:
    """(the server's PIDs with their children, the top process's start time) from an inspect."""
    pids = {x.pid for x in now.get("procs", [])}
    started = None
    if now["alive"]:
        out["running"], out["pid"] = True, now["pid"]
        pids.add(now["pid"])
        try:
            started = psutil.Process(now["pid"]).create_time()
            out["uptime_s"] = round(time.time() - started, 1)
            pids |= {c.pid for c in psutil.Process(now["pid"]).children(recursive=True)}
        except psutil.Error:
            pass
    elif pids:
        out["leftovers"] = sorted(pids)
    return pids, started


def _probe(launch: dict, p: dict, timeout: float, out: dict) -> bool:
    """/health, then the served model and acceptance from /v1/models and /metrics; True when a probe failed."""
    url = base_url(launch.get("host", "127.0.0.1"), launch.get("port", 8000))
    health = request(url + "/health", timeout=timeout)
    out["health"] = "ok" if health.status == 200 else health.describe()
    if health.status != 200:
        return True
    api_key = read_env(p).get("VLLM_API_KEY")
    names = served_models(request(url + "/v1/models", timeout=timeout, api_key=api_key))
    out["served_model"] = names[0] if len(names) == 1 else (names or None)
    metrics = request(url + "/metrics", timeout=timeout)
    if metrics.status != 200:
        return True
    figures = acceptance(spec_decode_counters(metrics.body.decode("utf-8", "replace")))
    out["acceptance_rate"] = figures["acceptance_rate"]
    out["mean_acceptance_length"] = figures["mean_acceptance_length"]
    out["draft_tokens"] = figures["draft_tokens"]
    return False


def _cluster_part(launch: dict, now: dict, out: dict) -> None:
    """A node of a multi-node vLLM: its rank and role, and its running local workers with their link to the head."""
    cluster = launch.get("cluster")
    if not cluster:
        return
    out.update(role=cluster["role"], rank=cluster["node_rank"], nnodes=cluster["nnodes"], local_workers=[])
    if out["running"]:
        out["local_workers"] = local_workers(launch, now)
        out["workers_connected"] = bool(out["local_workers"]) and all(w["connected"] for w in out["local_workers"])


def _worker_node(launch: dict, now: dict, out: dict) -> bool:
    """A headless node has no HTTP to ask: `health` is "ok" when all its local workers run and each is connected
    to the head, else what is missing (so invoke status exits as for an unhealthy server); True when not ok."""
    _cluster_part(launch, now, out)
    if out["running"]:
        out["health"] = missing_workers(launch["cluster"], out["local_workers"]) or "ok"
    return out["health"] != "ok"


def _node_msg(out: dict) -> str:
    head = f"vLLM worker node rank {out['rank']} (headless)"
    if not out["running"]:
        return f"{head} is not running"
    n = len(out["local_workers"])
    state = f"{n} local worker(s), connected to the head" if out["health"] == "ok" else out["health"]
    return f"{head} PID {out['pid']}, up {out['uptime_s']} s: {state}"


def _running_msg(out: dict) -> str:
    if out.get("role") == "worker":
        return _node_msg(out) + _log_note(out)
    if not out["running"]:
        return f"vLLM is not running (port {out['port']}: health {out['health']})"
    rate = out["acceptance_rate"]
    acc = f", acceptance {rate:.1%}" if rate is not None else ""
    msg = f"vLLM PID {out['pid']} on port {out['port']}, up {out['uptime_s']} s, health {out['health']}{acc}"
    return msg + _log_note(out)


def _again(record: dict) -> str:
    """The command that brings a torn-down server back: a cluster node's is its group's serving-cluster."""
    group = record.get("cluster_group")
    return f"invoke serving-cluster --group {group}" if group else "invoke provision"


def _without_launch(p: dict, out: dict) -> dict:
    """No launch here: torn down (teardown's record says when; not running, as a stopped unit is) or never
    provisioned (systemctl's "no such unit")."""
    record = torn_down(p)
    if record is None:
        out["msg"] = f"no vLLM launch rendered here ({p['launch']} is missing): not provisioned"
        return out
    out.update(provisioned=True, torn_down=record, port=record.get("port"))
    where = f" on port {record['port']}" if record.get("port") else ""  # a headless node listened nowhere
    out["msg"] = (f"torn down at {record['torn_down_at']} (invoke teardown; it served {record['served_model_name']}"
                  f"{where}): `{_again(record)}` starts it again")
    return out


def status(args: dict) -> dict:
    """The server's state for `invoke status` (args: pidfile, timeout_s per HTTP probe, nvidia_smi); read-only."""
    p = paths(args["pidfile"])
    launch = read_launch(p["launch"])
    out: dict = {"changed": False, "running": False, "pid": None, "port": None, "uptime_s": None, "health": None,
                 "served_model": None, "acceptance_rate": None, "mean_acceptance_length": None, "gpu_used_mib": None,
                 "provisioned": launch is not None}  # invoke status: "no such unit" (exit 4) when False
    if launch is None:
        return _without_launch(p, out)
    out.update(port=launch.get("port"), mode=launch.get("mode"), log=launch.get("log"), endpoint=endpoint(launch),
               min_acceptance_rate=(launch.get("acceptance") or {}).get("min_rate"))
    try:
        now = server_for(launch, p).inspect()
    except ModuleError as exc:
        out["msg"] = exc.msg
        return out
    pids, started = _processes(now, out)
    if is_headless(launch):
        failed = _worker_node(launch, now, out)
    else:
        failed = _probe(launch, p, args["timeout_s"], out)
        _cluster_part(launch, now, out)
    if pids:
        out["gpu_used_mib"] = gpu_used_mib(args["nvidia_smi"], pids)
    out.update(log_state(out["log"], pids))
    if out["running"] and not still_running(out["pid"], started, failed):
        out.update(running=False, exited_pid=out["pid"], pid=None, uptime_s=None)
        out["msg"] = f"vLLM PID {out['exited_pid']} exited while its status was read (health {out['health']})"
        return out
    running = read_json(p["running"]) or {}
    out["stale"] = bool(out["running"] and running.get("fingerprint") != launch.get("fingerprint"))
    out["msg"] = _running_msg(out)
    return out
