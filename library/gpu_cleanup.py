"""Free the GPU memory that the managed vLLM server holds, and prove it by measurement.

Measures the GPUs, has the managed server stopped by its one owner (dflash_host/vllm/process.py: its
systemd unit, else every process its pidfile proves is ours, including children left behind by a dead
server that still hold the GPU), stops leftovers of the unit's cgroup, waits until GPU memory used is
under a threshold, and lists every other GPU holder (PID, user, command, MiB) without touching it, unless
named in `kill_foreign`. Never finds a process by name; never signals a PID whose start time or command
line differ from the record. A host without an NVIDIA driver is skipped.
"""

from __future__ import annotations

import os
import time

import psutil

from dflash_host.host import systemd
from dflash_host.host.gpu_holders import (
    blocked_by_foreign,
    classify,
    describe_holders,
    find_holders,
    foreign_decision,
    parse_kill_foreign,
    play_uids,
)
from dflash_host.host.gpus import NoDriver, busy, query_gpus, query_or_fail, select_gpus, used_line, wait_until_free
from dflash_host.host.paths import managed_path
from dflash_host.host.processes import alive, brief, examine, read_pidfile, stop_processes
from dflash_host.module import Context, ModuleError, main
from dflash_host.vllm import stop_owner

ARGS = {
    "pidfile": {"include": "vllm_pidfile", "help": "the managed server's pidfile (dflash_host/host/processes.py); its proven processes are stopped"},
    "unit": {"type": "str", "default": None, "var": "vllm_service_name",
             "help": "the managed server's systemd unit (a system unit); used where systemd is PID 1"},
    "threshold_mib": {"type": "int", "default": 1024, "var": "gpu_free_threshold_mib",
                      "help": "a GPU is free when memory.used is below this many MiB (a CUDA context alone is ~500)"},
    "timeout_s": {"type": "float", "default": 60, "var": "gpu_cleanup_timeout_s",
                  "help": "seconds to wait, after stopping, for the driver to release the memory"},
    "grace_s": {"type": "float", "default": 10, "var": "gpu_cleanup_grace_s",
                "help": "seconds between SIGTERM and SIGKILL"},
    "kill_foreign": {"type": "list", "default": [], "var": "gpu_cleanup_kill_foreign",
                     "help": "other GPU holders that may be stopped: exact PIDs or exact command lines"},
    "allow_other_users": {"type": "bool", "default": False, "var": "gpu_cleanup_allow_other_users",
                          "help": "let kill_foreign stop processes of users other than the one the play runs as"},
    "keep_running": {"type": "bool", "default": False, "var": "gpu_cleanup_keep_running",
                     "help": "leave a running managed server alone (stop only leftovers of a dead one)"},
    "gpus": {"type": "list", "default": None, "var": "gpu_cleanup_gpus",
             "help": "GPU indices that must end up free; none: every GPU of the host"},
    "nvidia_smi": {"include": "nvidia_smi"},
    "device_prefix": {"type": "str", "default": None,
                      "help": "device node prefix looked for in /proc/*/fd; none: /dev/nvidia"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("nvidia_smi", "pidfile", "unit", "device_prefix")


def check_numbers(threshold_mib: int, timeout_s: float, grace_s: float) -> None:
    if threshold_mib < 0:
        raise ModuleError(
            f"threshold_mib (gpu_free_threshold_mib) is {threshold_mib}; it must be a number of MiB >= 0, e.g. 1024"
        )
    for name, value in (("timeout_s", timeout_s), ("grace_s", grace_s)):
        if value < 0:
            raise ModuleError(f"{name} is {value}; it must be a number of seconds >= 0")


# ---------------------------------------------------------------- what is ours


def unit_state(unit: str) -> dict | None:
    """{name, load_state, active_state, main_pid, cgroup} of a unit systemd knows, else None (also when
    systemd does not answer: its processes are then foreign holders, listed and never signalled)."""
    props = systemd.show(unit, ("LoadState", "ActiveState", "MainPID", "ControlGroup"), check=False)
    if props.get("LoadState", "not-found") == "not-found":
        return None
    return {
        "name": unit,
        "load_state": props.get("LoadState"),
        "active_state": props.get("ActiveState", "inactive"),
        "main_pid": systemd.main_pid(props),
        "cgroup": props.get("ControlGroup") or "",
    }


def _processes(pids: list) -> list[psutil.Process]:
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def survey_ours(args: dict, ctx: Context) -> dict:
    """What is provably the tool's: the pidfile's processes (a garbage pidfile: ModuleError, nothing
    signalled), the unit and its cgroup; whether the server is left running, and whether the pidfile is stale."""
    record = read_pidfile(args["pidfile"]) if args["pidfile"] else None
    found = examine(record) if record else {"managed": [], "refused": [], "unproven_group": []}
    for r in found["refused"]:
        ctx.warn(f"pidfile {args['pidfile']}: refused to signal PID {r['pid']}: {r['reason']}")
    managed = list(found["managed"])
    unit = unit_state(args["unit"]) if args["unit"] and systemd.present() else None
    unit_procs: list = []
    if unit:
        known = {m.pid for m in managed}
        unit_procs = [p for p in _processes(systemd.cgroup_pids(unit["cgroup"])) if p.pid not in known]
        managed += unit_procs
    unit_active = bool(unit and unit["active_state"] in systemd.ACTIVE_STATES)
    top_alive = bool(record) and any(p.pid == record["pid"] for p in found["managed"])
    left_running = bool(args["keep_running"] and (top_alive or unit_active))
    return {
        "record": record,
        "found": found,
        "managed": managed,
        "unit": unit,
        "unit_procs": unit_procs,
        "unit_active": unit_active,
        "left_running": left_running,
        "to_stop": [] if left_running else [p for p in managed if alive(p)],
        # The pidfile goes once its processes are stopped; kept while its PID names a live process that
        # is not ours (warned above), and while the server is deliberately left running.
        "pidfile_stale": bool(record) and not left_running and not any(r["top"] for r in found["refused"]),
    }


def survey_foreign(args: dict, kill: tuple, ours: dict, holders: list, ctx: Context) -> tuple[list, list]:
    """Report entries for the holders that are not ours, and the processes kill_foreign lets us stop."""
    kill_pids, kill_cmds = kill
    notes: dict = {}
    for item in ours["found"]["unproven_group"] + ours["found"]["refused"]:
        notes.setdefault(item["pid"], []).append(item["reason"])
    my_uid = play_uids()  # as root through sudo: the login user's processes count as ours too

    def decide(h: dict) -> tuple[bool, str]:
        return foreign_decision(
            h["pid"], h["cmdline"], h["uid"], my_uid, kill_pids, kill_cmds, args["allow_other_users"]
        )

    foreign, to_kill = classify(holders, {p.pid for p in ours["managed"]}, notes, decide)
    for pid in sorted(kill_pids - {h["pid"] for h in holders}):
        ctx.warn(f"kill_foreign names PID {pid}, which holds no GPU memory; left alone")
    return foreign, to_kill


# ---------------------------------------------------------------- stopping


def _owner_stop(pidfile: str, ctx: Context, grace_s: float) -> dict | None:
    """The pidfile's process tree stopped by its owner; processes that survive it are reported with the foreign
    ones, not raised here."""
    try:
        return stop_owner(pidfile, ctx, grace_s)
    except ModuleError as exc:
        report = exc.data.get("stop")
        if not isinstance(report, dict) or "survivors" not in report:
            raise
        return report


def _merge(a: dict, b: dict | None) -> dict:
    """Two stop_processes reports as one (lists joined, seconds added)."""
    if not b:
        return a
    out = {k: (v + b.get(k, []) if isinstance(v, list) else v) for k, v in a.items()}
    out["seconds"] = round(a["seconds"] + b.get("seconds", 0.0), 3)
    return out


def stop_ours(args: dict, ours: dict, ctx: Context) -> dict:
    """The managed server through its owner (dflash_host/vllm/process.py): the unit, then the pidfile's
    tree (children of a dead server too); then what the unit's cgroup still holds. One stop report."""
    grace = args["grace_s"]
    report = stop_processes([], grace, ctx)
    if ours["left_running"]:
        return report
    unit = ours["unit"]
    if ours["unit_active"]:
        ctx.say(f"systemctl stop {unit['name']}")
        stop_owner(args["pidfile"], ctx, grace, unit=unit["name"])
        unit["stopped"] = True
    if ours["record"] and any(alive(p) for p in ours["found"]["managed"]):
        report = _merge(report, _owner_stop(args["pidfile"], ctx, grace))
    leftovers = [p for p in ours["unit_procs"] if alive(p)]
    if leftovers:
        report = _merge(report, stop_processes(leftovers, grace, ctx))
    return report


def stop_named_foreign(foreign: list, to_kill: list, grace_s: float, ctx: Context) -> dict:
    report = stop_processes(to_kill, grace_s, ctx, groups=False)
    for f in foreign:
        if f["action"] == "stop":
            f["action"] = "stopped" if f["pid"] not in report["survivors"] else "survived"
    return report


def raise_survivors(stopped: dict, stopped_foreign: dict, result: dict) -> None:
    survivors = stopped["survivors"] + stopped_foreign["survivors"]
    if not survivors:
        return
    errors = stopped["errors"] + stopped_foreign["errors"]
    why = (
        f"could not be signalled ({'; '.join(errors)}): run the play as the server's user or as root"
        if errors
        else "survived SIGKILL (uninterruptible I/O?): look at them with `ps -o pid,stat,wchan,args -p PID`"
    )
    raise ModuleError(f"process(es) {survivors} {why}; the GPU may stay busy", **result)


# ---------------------------------------------------------------- measuring


def still_busy_error(still: list, left: list, scan: dict, threshold: int, seconds: float, result: dict) -> ModuleError:
    what = "; ".join(f"GPU {g['index']} has {g['memory_used_mib']} MiB used" for g in still)
    busy_idx = {g["index"] for g in still}
    blockers = [h for h in left if h.get("gpu") is None or h["gpu"] in busy_idx]
    if blockers:
        msg = (
            f"{what} (threshold {threshold} MiB), held by process(es) this tool does not manage, left "
            f"alone: {describe_holders(blockers)}. Stop them yourself, or name them in gpu_cleanup_kill_foreign "
            "(exact PID or command line); another user's process also needs "
            "gpu_cleanup_allow_other_users: true"
        )
    else:
        hint = (
            f" ({scan['unreadable']} processes' fds were unreadable here: run as root to see them)"
            if scan["unreadable"]
            else ""
        )
        msg = (
            f"{what} after {seconds:g} s (threshold {threshold} MiB), and no holder is visible from here"
            f"{hint}; it may belong to another container or VM; check `nvidia-smi` on the host"
        )
    return ModuleError(msg, **result)


def measure_after(args: dict, ours: dict, left: list, indices: list, ctx: Context) -> list:
    """The reading after stopping: waited for, unless the server is kept or foreign holders we leave
    alone keep a GPU busy on their own (waiting could not change that)."""
    cmd, threshold = args["nvidia_smi"], args["threshold_mib"]
    if ours["left_running"] or blocked_by_foreign(left, indices, threshold):
        return query_or_fail(cmd)
    return wait_until_free(cmd, indices, threshold, args["timeout_s"], ctx)


# ---------------------------------------------------------------- run


def run(args: dict, ctx: Context) -> dict:
    cmd, threshold = args["nvidia_smi"], args["threshold_mib"]
    check_numbers(threshold, args["timeout_s"], args["grace_s"])
    if args["pidfile"]:  # the stale pidfile is removed below: only one plausibly the tool's
        managed_path(args["pidfile"], "pidfile")
    kill = parse_kill_foreign(args["kill_foreign"])
    try:
        before = query_gpus(cmd)
    except NoDriver as exc:
        return {"changed": False, "skipped": True, "msg": f"skipped: no usable NVIDIA driver ({exc}); nothing to free"}
    indices = select_gpus(before, args["gpus"])
    ours = survey_ours(args, ctx)
    holders, scan = find_holders(cmd, before, indices, threshold, args["device_prefix"])
    foreign, to_kill = survey_foreign(args, kill, ours, holders, ctx)
    result = {
        "threshold_mib": threshold,
        "gpus_checked": indices,
        "managed": [brief(p) for p in ours["managed"]],
        "refused": ours["found"]["refused"],
        "foreign": foreign,
        "fd_scan": scan,
        "unit": ours["unit"],
        "left_running": ours["left_running"],
    }
    if ctx.check:
        return check_result(result, ours, to_kill, before, indices)
    return free(args, ctx, result, ours, (foreign, to_kill, scan), (before, indices))


def free(args: dict, ctx: Context, result: dict, ours: dict, others: tuple, gpus: tuple) -> dict:
    """Stop ours and the named foreign holders, remove the stale pidfile, wait for the memory, report."""
    foreign, to_kill, scan = others
    before, indices = gpus
    t0 = time.monotonic()
    stopped = stop_ours(args, ours, ctx)
    stopped_foreign = stop_named_foreign(foreign, to_kill, args["grace_s"], ctx)
    unit_stopped = bool(ours["unit"] and ours["unit"].get("stopped"))
    changed = unit_stopped or bool(stopped["stopped"] or stopped_foreign["stopped"])
    result["stopped"] = _compact(stopped)
    if stopped_foreign["stopped"]:
        result["stopped_foreign"] = _compact(stopped_foreign)
    raise_survivors(stopped, stopped_foreign, result)
    if ours["pidfile_stale"] and os.path.exists(args["pidfile"]):
        os.unlink(args["pidfile"])
        result["pidfile_removed"] = args["pidfile"]
        changed = True
    left = [f for f in foreign if f["action"] == "left"]
    after = measure_after(args, ours, left, indices, ctx)
    seconds = round(time.monotonic() - t0, 3)
    result.update(changed=changed, seconds=seconds, gpus=[_gpu_row(g, after) for g in before if g["index"] in indices])
    still = busy(after, indices, args["threshold_mib"])
    if still and not ours["left_running"]:
        raise still_busy_error(still, left, scan, args["threshold_mib"], seconds, result)
    result["msg"] = done_msg(ours, stopped, stopped_foreign, (after, indices, bool(still)), left, args["threshold_mib"])
    if ctx.diff and changed:
        result["diff"] = {
            "before": {"processes": [s["pid"] for s in result["managed"]], "used_mib": _used(before, indices)},
            "after": {"processes": [], "used_mib": _used(after, indices)},
        }
    return result


# ---------------------------------------------------------------- reporting


def done_msg(ours: dict, stopped: dict, stopped_foreign: dict, reading: tuple, left: list, threshold: int) -> str:
    after, indices, still = reading
    unit, record = ours["unit"], ours["record"]
    n = len(stopped["stopped"]) + len(stopped_foreign["stopped"])
    parts = []
    if unit and unit.get("stopped"):
        parts.append(f"stopped unit {unit['name']}")
    if n:
        parts.append(f"stopped {n} process(es) in {stopped['seconds'] + stopped_foreign['seconds']:.2f} s")
    if ours["left_running"]:
        parts.append(f"left the running managed server (pid {record['pid'] if record else unit['main_pid']}) alone")
    state = "GPU in use by the managed server" if ours["left_running"] and still else "GPU free"
    msg = f"{', '.join(parts) + '; ' if parts else ''}{state}: {used_line(after, indices)} (threshold {threshold} MiB)"
    if left:
        msg += f"; {len(left)} foreign holder(s) left alone: {describe_holders(left)}"
    return msg


def check_result(result: dict, ours: dict, to_kill: list, before: list, indices: list) -> dict:
    """Check mode: what would be stopped and removed; nothing is."""
    to_stop, unit = ours["to_stop"], ours["unit_active"] and not ours["left_running"]
    left = [f for f in result["foreign"] if f["action"] == "left"]
    parts = []
    if unit:
        parts.append("would stop the unit")
    if to_stop:
        parts.append(f"would stop {len(to_stop)} managed process(es) {[p.pid for p in to_stop]}")
    if to_kill:
        parts.append(f"would stop {len(to_kill)} named foreign holder(s) {[p.pid for p in to_kill]}")
    if ours["pidfile_stale"] and not parts:
        parts.append("would remove the stale pidfile")
    msg = "; ".join(parts or ["nothing to stop"])
    if left:
        msg += f"; would leave {len(left)} foreign holder(s) alone: {describe_holders(left)}"
    result.update(
        changed=bool(to_stop or to_kill or unit or ours["pidfile_stale"]),
        would_stop=[p.pid for p in to_stop + to_kill],
        gpus=[_gpu_row(g, None) for g in before if g["index"] in indices],
        msg=msg,
    )
    return result


def _compact(stopped: dict) -> dict:
    """stop_processes' report with pids in place of the process details (listed under managed/foreign)."""
    out = {k: v for k, v in stopped.items() if k != "stopped"}
    out["pids"] = [s["pid"] for s in stopped["stopped"]]
    return out


def _used(gpus: list, indices: list) -> dict:
    return {str(g["index"]): g["memory_used_mib"] for g in gpus if g["index"] in indices}


def _gpu_row(g: dict, after: list | None) -> dict:
    row = {"index": g["index"], "name": g["name"], "total_mib": g["memory_total_mib"], "before_mib": g["memory_used_mib"]}
    if after is not None:
        row["after_mib"] = next((a["memory_used_mib"] for a in after if a["index"] == g["index"]), None)
    return row


if __name__ == "__main__":
    main(ARGS, run)
