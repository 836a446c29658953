"""One node of a multi-node vLLM as library/vllm_cluster asks about it: probe, verify, one_host.

probe: does this node run the rendered launch (the fingerprint test vllm_server's started uses). verify: the
node's part is there, judged by what runs on it (its local workers, a worker node's link to the head, the head's
/health), one look or several within wait_s. one_host: a one-host playbook is refused on a cluster node before it
stops or builds anything. The task module's docstring has the details; these are the front's probe_node,
verify_node and refuse_one_host (dflash_host.vllm).
"""

from __future__ import annotations

import time

from dflash_host.host.files import read_json
from dflash_host.host.gpus import NoDriver, query_compute_apps
from dflash_host.module import Context, ModuleError
from dflash_host.vllm.cluster import group_name, local_workers, missing_workers, node_name, node_processes, refuse_node
from dflash_host.vllm.log import find_fatal, lines_after_marker, root_cause
from dflash_host.vllm.probe import base_url, request
from dflash_host.vllm.records import launch_state, load_launch, paths, read_launch

LOOK_EVERY_S = 0.5


# --------------------------------------------------------------------------- probe


def probe_node(args: dict) -> dict:
    """action probe: whether this node runs the rendered launch (`current`); rank, role and PID as rendered and
    running."""
    p = paths(args["pidfile"])
    launch = read_launch(p["launch"])
    out: dict = {"changed": False, "current": False, "rendered": launch is not None, "running": False, "pid": None,
                 "rank": None, "role": None, "headless": False}
    if launch is None:
        out["msg"] = f"no vLLM launch rendered here ({p['launch']} is missing): not current"
        return out
    cluster = launch.get("cluster") or {}
    state = launch_state(launch, p, args["fingerprint"])
    out.update(current=state["fresh"], running=state["now"]["alive"], pid=state["now"]["pid"], fingerprint=state["want"],
               rank=cluster.get("node_rank"), role=cluster.get("role"), headless=bool(cluster.get("headless")))
    what = f"node rank {out['rank']} ({out['role']})" if cluster else "vLLM (not a cluster node)"
    if out["current"]:
        out["msg"] = f"{what} runs the rendered launch (PID {out['pid']})"
    elif out["running"]:
        out["msg"] = f"{what} runs another launch (PID {out['pid']}): not current"
    else:
        out["msg"] = f"{what} is not running: not current"
    return out


# --------------------------------------------------------------------------- verify


def gpu_pids(cmd: str | None, pids: set) -> list | None:
    """The node's processes that hold a GPU (nvidia-smi's compute apps); None without a usable driver."""
    try:
        apps = query_compute_apps(cmd)
    except NoDriver:
        return None
    return sorted({a["pid"] for a in apps if a.get("pid") in pids})


def head_health(launch: dict, timeout: float) -> str:
    res = request(base_url(launch["host"], launch["port"]) + "/health", timeout=timeout)
    return "ok" if res.status == 200 else res.describe()


def look(launch: dict, p: dict, args: dict) -> dict:
    """One look at the node: {rank, role, pid, current, local_workers, health, gpu_pids, problem}."""
    cluster = launch["cluster"]
    state = launch_state(launch, p)
    now = state["now"]
    out: dict = {"rank": cluster["node_rank"], "role": cluster["role"], "pid": now["pid"], "current": state["fresh"],
                 "expected_workers": cluster["local_world_size"], "local_workers": [], "health": None, "gpu_pids": None,
                 "problem": None}
    if not now["alive"]:
        left = f" ({len(now['procs'])} leftover process(es) of it live on)" if now.get("procs") else ""
        out["problem"] = f"vLLM is not running{left}"
        return out
    out["local_workers"] = local_workers(launch, now)
    out["problem"] = missing_workers(cluster, out["local_workers"])
    if cluster["role"] == "head":
        out["health"] = head_health(launch, args["timeout_s"])
        if out["problem"] is None and out["health"] != "ok":
            out["problem"] = f"the head does not answer /health ({out['health']})"
    out["gpu_pids"] = gpu_pids(args["nvidia_smi"], {x.pid for x in node_processes(now)})
    return out


def _log_cause(launch: dict, pid: int | None) -> str:
    """' Its log shows: ...' when the node's log since its start holds a fatal line, else ''."""
    if not pid:
        return ""
    lines = lines_after_marker(launch["log"], pid) or []
    if find_fatal(lines) is None:
        return ""
    return f" Its log {launch['log']} shows (first exception): {' | '.join(root_cause(lines))}."


def _fix(cluster: dict, problem: str) -> str:
    """What to run: a node not running its launch restarts the cluster on the next serving-cluster run; one whose
    vLLM runs without its workers (or their link) stays current, and vLLM takes no node back into a running group."""
    group = group_name(cluster)
    if problem.startswith("vLLM is not running"):
        return (f"run `invoke serving-cluster --group {group}`: a node that does not run its launch restarts the whole "
                "cluster once")
    reach = ""
    if "not connected" in problem:
        reach = (f"check that the head ({cluster['master_addr']}) runs and that this node reaches its port "
                 f"{cluster.get('master_port') or '(cluster_master_port)'}, then ")
    return (f"{reach}run `invoke teardown --group {group}`, then `invoke serving-cluster --group {group}` (vLLM cannot "
            "take a node back into a running group, so the whole cluster starts again)")


def _not_yet(p: dict, args: dict) -> dict | None:
    """Check mode: the result when this node does not run the launch the play renders (nothing to verify yet; the
    real run starts it first), else None."""
    launch = read_launch(p["launch"])
    cluster = (launch or {}).get("cluster")
    out: dict = {"changed": False, "rank": None, "role": None, "pid": None, "local_workers": [], "gpu_pids": None}
    if launch is None or not cluster:
        out["msg"] = f"would verify this node once its cluster launch is rendered and started ({p['launch']})"
        return out
    out.update(rank=cluster.get("node_rank"), role=cluster.get("role"))
    state = launch_state(launch, p, args["fingerprint"])
    if state["fresh"]:
        return None
    doing = "runs another launch" if state["now"]["alive"] else "is not running"
    out["msg"] = f"would verify {node_name(cluster)} once it runs its launch (it {doing} now; nothing verified)"
    return out


def verify_node(args: dict, ctx: Context) -> dict:
    """action verify: the node's local workers run (and, on a worker node, each is connected to the head; the head
    answers /health), else one paragraph naming its rank, what is missing and the fix."""
    p = paths(args["pidfile"])
    pending = _not_yet(p, args) if ctx.check else None
    if pending is not None:
        return pending
    launch = load_launch(p)
    cluster = launch.get("cluster")
    if not cluster:
        raise ModuleError(
            f"the launch rendered at {p['launch']} is not a node of a multi-node vLLM (cluster_nnodes, "
            "cluster_node_rank and cluster_master_addr are unset); set them for this host or drop the verify task"
        )
    deadline = time.monotonic() + max(0.0, args["wait_s"])
    out = look(launch, p, args)
    while out["problem"] and time.monotonic() < deadline:
        time.sleep(LOOK_EVERY_S)
        out = look(launch, p, args)
    problem = out.pop("problem")
    if problem and ctx.check:
        # the run may restart the whole cluster first (another node not current), which this node cannot know
        ctx.warn(f"{node_name(cluster)}: {problem}; a run fails here unless it restarts the cluster first "
                 f"(Fix: {_fix(cluster, problem)})")
        out.update(changed=False, problem=problem,
                   msg=f"would verify {node_name(cluster)} after the run's restarts (now: {problem})")
        return out
    if problem:
        pid = out["pid"] or (read_json(p["running"]) or {}).get("pid")
        raise ModuleError(f"{node_name(cluster)}: {problem}.{_log_cause(launch, pid)} Fix: {_fix(cluster, problem)}", **out)
    if not ctx.check and launch.get("mode") != "systemd":
        launch_state(launch, p)["server"].ready()  # the workers join the pidfile's tree
    n = len(out["local_workers"])
    link = "" if cluster["role"] == "head" else f", connected to the head at {cluster['master_addr']}"
    out.update(changed=False, msg=f"{node_name(cluster)}: PID {out['pid']}, {n} of {n} local workers running{link}")
    return out


def refuse_one_host(args: dict) -> dict:
    """action one_host, a one-host playbook's first check: a node of a serving cluster is refused before anything
    is stopped, built or switched (vllm_server's render refuses too, but later: after restart-server's stop,
    rebuild's build)."""
    refuse_node(paths(args["pidfile"]), args["inventory_name"])
    return {"changed": False, "msg": "not a node of a serving cluster"}
