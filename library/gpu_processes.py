"""Free the GPU memory that the managed vLLM server holds, and prove it by measurement.

Stops the managed server completely (its systemd unit, else every process its pidfile proves is
ours: process group, descendants, recorded tree), waits until GPU memory used is under a threshold,
and lists every other GPU holder (PID, user, command, MiB) without touching it, unless named in
`kill_foreign`. Never finds a process by name; never signals a PID whose start time or command line
differ from the record. A host without an NVIDIA driver is skipped.

| argument | type | default | meaning |
|---|---|---|---|
| pidfile | path | none | the managed server's pidfile (see dflash_host/proc.py) |
| unit | str | none | its systemd unit (a system unit: dflash_host/systemd.py); used when systemd is PID 1 |
| threshold_mib | int | 1024 | a GPU is free when memory.used is below this many MiB |
| timeout_s | float | 60 | how long to wait for the memory to be released |
| grace_s | float | 10 | seconds between SIGTERM and SIGKILL |
| kill_foreign | list | [] | other holders that may be stopped: exact PIDs or exact command lines |
| allow_other_users | bool | false | let kill_foreign stop processes of users other than this one |
| keep_running | bool | false | leave a running managed server alone (stop only its leftovers) |
| gpus | list | all | GPU indices that must end up free |
| nvidia_smi | str | nvidia-smi | the nvidia-smi command |
| device_prefix | str | /dev/nvidia | device node prefix looked for in /proc/*/fd |
"""

from __future__ import annotations

import os
import time

import psutil

from dflash_host import gpu as _gpu
from dflash_host import systemd as _systemd
from dflash_host.module import Context, ModuleError, main
from dflash_host.paths import managed_path
from dflash_host.proc import alive, examine, read_pidfile, stop_processes

ARGS = {
    "pidfile": {"type": "path", "default": None},
    "unit": {"type": "str", "default": None},
    "threshold_mib": {"type": "int", "default": 1024},
    "timeout_s": {"type": "float", "default": 60},
    "grace_s": {"type": "float", "default": 10},
    "kill_foreign": {"type": "list", "default": []},
    "allow_other_users": {"type": "bool", "default": False},
    "keep_running": {"type": "bool", "default": False},
    "gpus": {"type": "list", "default": None},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "device_prefix": {"type": "str", "default": "/dev/nvidia"},
}


# ---------------------------------------------------------------- pure decisions


def check_numbers(threshold_mib: int, timeout_s: float, grace_s: float) -> None:
    if threshold_mib < 0:
        raise ModuleError(
            f"threshold_mib (gpu_free_threshold_mib) is {threshold_mib}; it must be a number of MiB >= 0, e.g. 1024"
        )
    for name, value in (("timeout_s", timeout_s), ("grace_s", grace_s)):
        if value < 0:
            raise ModuleError(f"{name} is {value}; it must be a number of seconds >= 0")


def parse_kill_foreign(entries: list) -> tuple[set, set]:
    """Split kill_foreign into exact PIDs and exact command lines (as `ps -o args` shows them)."""
    pids, cmds = set(), set()
    for entry in entries or []:
        if isinstance(entry, bool):
            raise ModuleError(f"kill_foreign entry {entry!r} is neither a PID nor a command line")
        if isinstance(entry, int):
            pid = entry
        elif isinstance(entry, str) and entry.strip().isdigit():
            pid = int(entry.strip())
        elif isinstance(entry, str) and entry.strip():
            cmds.add(" ".join(entry.split()))
            continue
        else:
            raise ModuleError(
                f"kill_foreign entry {entry!r} is neither a PID nor a command line; "
                "write a PID (1234) or the exact command line ('python3 train.py --gpu 0')"
            )
        if pid <= 1:
            raise ModuleError(f"kill_foreign entry {entry!r} is not a valid PID (it must be > 1)")
        pids.add(pid)
    return pids, cmds


def foreign_decision(
    pid: int, cmdline: list, uid: int | None, my_uid: int, kill_pids: set, kill_cmds: set, allow_other_users: bool
) -> tuple[bool, str]:
    """Whether a holder the tool does not manage may be stopped, and why (or why not)."""
    named = pid in kill_pids or (bool(cmdline) and " ".join(" ".join(cmdline).split()) in kill_cmds)
    if not named:
        return False, "not managed by this tool and not named in gpu_cleanup_kill_foreign"
    if uid is None:
        return False, "named in gpu_cleanup_kill_foreign, but its owner cannot be read here"
    if uid != my_uid and not allow_other_users:
        return False, (
            "named in gpu_cleanup_kill_foreign, but it belongs to another user; "
            "set gpu_cleanup_allow_other_users: true to stop it"
        )
    return True, "named in gpu_cleanup_kill_foreign"


def select_gpus(gpus: list, requested: list | None) -> list[int]:
    """The indices that must end up free: `requested` (checked against what exists) or all."""
    indices = [g["index"] for g in gpus]
    if requested is None:
        return indices
    out = []
    for value in requested:
        try:
            idx = int(value)
        except (TypeError, ValueError):
            raise ModuleError(f"gpus entry {value!r} is not a GPU index; use numbers such as [0, 1]")
        if idx not in indices:
            raise ModuleError(f"gpus names GPU {idx}, but this host has GPU(s) {indices}; fix 'gpus'")
        out.append(idx)
    return out


def busy(gpus: list, indices: list, threshold_mib: int) -> list[dict]:
    """The selected GPUs whose used memory is at or above the threshold (unknown counts as busy)."""
    return [g for g in gpus if g["index"] in indices and (g["memory_used_mib"] is None or g["memory_used_mib"] >= threshold_mib)]


def blocked_by_foreign(foreign_left: list, indices: list, threshold_mib: int) -> dict:
    """GPUs that foreign holders we leave alone keep busy on their own: {index: MiB they hold}."""
    held: dict[int, int] = {}
    for h in foreign_left:
        if h.get("gpu") in indices and h.get("mib"):
            held[h["gpu"]] = held.get(h["gpu"], 0) + h["mib"]
    return {i: mib for i, mib in held.items() if mib >= threshold_mib}


def describe_holders(holders: list) -> str:
    parts = []
    for h in holders:
        mib = f"{h['mib']} MiB" if h.get("mib") is not None else "MiB unknown"
        gpu = f"GPU {h['gpu']}" if h.get("gpu") is not None else "GPU ?"
        cmd = " ".join(h.get("cmdline") or []) or h.get("process_name") or "?"
        if len(cmd) > 120:
            cmd = cmd[:117] + "..."
        parts.append(f"pid {h['pid']} (user {h.get('user') or '?'}, {gpu}, {mib}): {cmd}")
    return "; ".join(parts)


def used_line(gpus: list, indices: list) -> str:
    return ", ".join(f"GPU {g['index']} {g['memory_used_mib']} MiB" for g in gpus if g["index"] in indices)


# ---------------------------------------------------------------- systemd


def unit_state(unit: str) -> dict:
    """{load_state, active_state, main_pid, cgroup} of a unit, from `systemctl show` (dflash_host.systemd)."""
    props = _systemd.show(unit, ("LoadState", "ActiveState", "MainPID", "ControlGroup"))
    return {
        "load_state": props.get("LoadState", "not-found"),
        "active_state": props.get("ActiveState", "inactive"),
        "main_pid": _systemd.main_pid(props),
        "cgroup": props.get("ControlGroup") or "",
    }


def cgroup_processes(cgroup: str) -> list[psutil.Process]:
    """The processes in a unit's cgroup (v2, else v1's systemd hierarchy): systemd put them there."""
    if not cgroup:
        return []
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd"):
        path = f"{root}{cgroup}/cgroup.procs"
        try:
            with open(path) as fh:
                pids = [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            continue
        procs = []
        for pid in pids:
            try:
                procs.append(psutil.Process(pid))
            except psutil.Error:
                continue
        return procs
    return []


# ---------------------------------------------------------------- holders


def _proc_info(pid: int) -> dict:
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            return {"visible": True, "user": proc.username(), "uid": proc.uids().real, "cmdline": proc.cmdline()}
    except psutil.AccessDenied:
        try:
            proc = psutil.Process(pid)
            return {"visible": True, "user": proc.username(), "uid": proc.uids().real, "cmdline": []}
        except psutil.Error:
            return {"visible": True, "user": None, "uid": None, "cmdline": []}
    except psutil.Error:
        return {"visible": False, "user": None, "uid": None, "cmdline": []}


def find_holders(cmd: str, gpus: list, indices: list, threshold_mib: int, prefix: str) -> tuple[list, dict]:
    """GPU holders: nvidia-smi's compute apps; plus a /proc fd scan when that list is empty (or names
    PIDs this namespace cannot see) while memory is used. Returns (holders, fd_scan report)."""
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    holders = []
    for app in _gpu.query_compute_apps(cmd):
        info = _proc_info(app["pid"])
        holders.append(
            {
                "pid": app["pid"],
                "process_name": app["process_name"],
                "mib": app["used_mib"],
                "gpu": by_uuid.get(app["gpu_uuid"]),
                "source": "nvidia-smi",
                **info,
            }
        )
    hidden = not holders or any(not h["visible"] for h in holders)
    scan = {"used": False, "holders": {}, "unreadable": 0}
    if hidden and busy(gpus, indices, threshold_mib):
        found, denied = _gpu.scan_device_fds(prefix)
        scan = {"used": True, "holders": {str(pid): devs for pid, devs in sorted(found.items())}, "unreadable": denied}
        listed = {h["pid"] for h in holders}
        for pid, devices in sorted(found.items()):
            if pid in listed:
                continue
            info = _proc_info(pid)
            holders.append(
                {"pid": pid, "process_name": None, "mib": None, "gpu": None, "source": "fd-scan", "devices": devices, **info}
            )
    return holders, scan


# ---------------------------------------------------------------- run


def _query(cmd: str) -> list:
    try:
        return _gpu.query_gpus(cmd)
    except _gpu.NoDriver as exc:
        raise ModuleError(f"nvidia-smi stopped answering while freeing the GPU: {exc}")


def wait_until_free(cmd: str, indices: list, threshold_mib: int, timeout_s: float, ctx: Context) -> list:
    """Poll nvidia-smi (tenacity, bounded by timeout_s) until the GPUs are free; return the last reading."""
    import tenacity

    def note(state: tenacity.RetryCallState) -> None:
        ctx.say(f"waiting for GPU memory to be released: {used_line(state.outcome.result(), indices)}")

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout_s),
        wait=tenacity.wait_exponential(multiplier=0.05, max=1.0),
        retry=tenacity.retry_if_result(lambda g: bool(busy(g, indices, threshold_mib))),
        before_sleep=note,
        retry_error_callback=lambda state: state.outcome.result(),
    )
    return retrying(_query, cmd)


def run(args: dict, ctx: Context) -> dict:
    cmd, threshold = args["nvidia_smi"], args["threshold_mib"]
    check_numbers(threshold, args["timeout_s"], args["grace_s"])
    if args["pidfile"]:  # the stale pidfile is removed below: only one plausibly the tool's
        managed_path(args["pidfile"], "pidfile")
    kill_pids, kill_cmds = parse_kill_foreign(args["kill_foreign"])
    try:
        before = _gpu.query_gpus(cmd)
    except _gpu.NoDriver as exc:
        return {"changed": False, "skipped": True, "msg": f"skipped: no usable NVIDIA driver ({exc}); nothing to free"}
    indices = select_gpus(before, args["gpus"])

    # What is ours: the pidfile's proven processes (garbage pidfile: ModuleError, nothing signalled).
    record = read_pidfile(args["pidfile"]) if args["pidfile"] else None
    found = examine(record) if record else {"managed": [], "refused": [], "unproven_group": []}
    for r in found["refused"]:
        ctx.warn(f"pidfile {args['pidfile']}: refused to signal PID {r['pid']}: {r['reason']}")
    managed = list(found["managed"])
    unit = None
    if args["unit"] and _systemd.present():
        unit = dict(unit_state(args["unit"]), name=args["unit"])
        if unit["load_state"] == "not-found":
            unit = None
        else:
            managed += [p for p in cgroup_processes(unit["cgroup"]) if p.pid not in {m.pid for m in managed}]
    unit_active = bool(unit and unit["active_state"] in ("active", "activating", "reloading", "deactivating"))
    top_alive = bool(record) and any(p.pid == record["pid"] for p in found["managed"])
    left_running = args["keep_running"] and (top_alive or unit_active)
    to_stop = [] if left_running else [p for p in managed if alive(p)]

    holders, scan = find_holders(cmd, before, indices, threshold, args["device_prefix"])
    ours = {p.pid for p in managed}
    unproven = {u["pid"]: u["reason"] for u in found["unproven_group"]}
    refused = {r["pid"]: r["reason"] for r in found["refused"]}
    my_uid = os.geteuid()
    foreign, to_kill = [], []
    for h in holders:
        if h["pid"] in ours:
            continue
        ok, reason = foreign_decision(h["pid"], h["cmdline"], h["uid"], my_uid, kill_pids, kill_cmds, args["allow_other_users"])
        if h["pid"] in unproven:
            reason += f"; {unproven[h['pid']]}"
        if h["pid"] in refused:
            reason += f"; {refused[h['pid']]}"
        entry = {k: h.get(k) for k in ("pid", "user", "cmdline", "mib", "gpu", "source", "devices", "process_name")}
        entry.update(action="stop" if ok else "left", reason=reason)
        foreign.append(entry)
        if ok:
            try:
                to_kill.append(psutil.Process(h["pid"]))
            except psutil.Error:
                entry["action"] = "gone"
    left = [f for f in foreign if f["action"] == "left"]
    for pid in sorted(kill_pids - {h["pid"] for h in holders}):
        ctx.warn(f"kill_foreign names PID {pid}, which holds no GPU memory; left alone")

    # Our pidfile goes once its processes are stopped; kept while its PID names a live process that is
    # not ours (the warning above says why), and while the server is deliberately left running.
    pidfile_stale = bool(record) and not left_running and not any(r["top"] for r in found["refused"])
    result = {
        "threshold_mib": threshold,
        "gpus_checked": indices,
        "managed": [_brief(p) for p in managed],
        "refused": found["refused"],
        "foreign": foreign,
        "fd_scan": scan,
        "unit": unit,
        "left_running": left_running,
    }
    if ctx.check:
        would = bool(to_stop or to_kill or (unit_active and not left_running) or pidfile_stale)
        result.update(
            changed=would,
            would_stop=[p.pid for p in to_stop + to_kill],
            gpus=[_gpu_row(g, None) for g in before if g["index"] in indices],
            msg=_check_msg(to_stop, to_kill, left, unit_active and not left_running, pidfile_stale),
        )
        return result

    t0 = time.monotonic()
    changed = False
    if unit_active and not left_running:
        ctx.say(f"systemctl stop {unit['name']}")
        _systemd.stop(unit["name"], args["grace_s"])
        unit["stopped"] = True
        changed = True
    stopped = stop_processes([p for p in to_stop if alive(p)], args["grace_s"], ctx)
    stopped_foreign = stop_processes(to_kill, args["grace_s"], ctx, groups=False)
    for f in foreign:
        if f["action"] == "stop":
            f["action"] = "stopped" if f["pid"] not in stopped_foreign["survivors"] else "survived"
    changed = changed or bool(stopped["stopped"] or stopped_foreign["stopped"])
    result["stopped"] = _compact(stopped)
    if stopped_foreign["stopped"]:
        result["stopped_foreign"] = _compact(stopped_foreign)
    survivors = stopped["survivors"] + stopped_foreign["survivors"]
    if survivors:
        errors = stopped["errors"] + stopped_foreign["errors"]
        why = (
            f"could not be signalled ({'; '.join(errors)}): run the play as the server's user or as root"
            if errors
            else "survived SIGKILL (uninterruptible I/O?): look at them with `ps -o pid,stat,wchan,args -p PID`"
        )
        raise ModuleError(f"process(es) {survivors} {why}; the GPU may stay busy", **result)
    if pidfile_stale and os.path.exists(args["pidfile"]):
        os.unlink(args["pidfile"])
        result["pidfile_removed"] = args["pidfile"]
        changed = True

    blocked = blocked_by_foreign(left, indices, threshold)
    if left_running:
        after = _query(cmd)
    elif blocked:
        after = _query(cmd)
    else:
        after = wait_until_free(cmd, indices, threshold, args["timeout_s"], ctx)
    seconds = round(time.monotonic() - t0, 3)
    result.update(changed=changed, seconds=seconds, gpus=[_gpu_row(g, after) for g in before if g["index"] in indices])
    still = busy(after, indices, threshold)
    if still and not left_running:
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
        raise ModuleError(msg, **result)

    n = len(stopped["stopped"]) + len(stopped_foreign["stopped"])
    parts = []
    if unit and unit.get("stopped"):
        parts.append(f"stopped unit {unit['name']}")
    if n:
        parts.append(f"stopped {n} process(es) in {stopped['seconds'] + stopped_foreign['seconds']:.2f} s")
    if left_running:
        parts.append(f"left the running managed server (pid {record['pid'] if record else unit['main_pid']}) alone")
    state = "GPU in use by the managed server" if left_running and still else "GPU free"
    msg = f"{', '.join(parts) + '; ' if parts else ''}{state}: {used_line(after, indices)} (threshold {threshold} MiB)"
    if left:
        msg += f"; {len(left)} foreign holder(s) left alone: {describe_holders(left)}"
    result["msg"] = msg
    if ctx.diff and changed:
        result["diff"] = {
            "before": {"processes": [s["pid"] for s in result["managed"]], "used_mib": _used(before, indices)},
            "after": {"processes": [], "used_mib": _used(after, indices)},
        }
    return result


def _brief(proc: psutil.Process) -> dict:
    try:
        with proc.oneshot():
            return {"pid": proc.pid, "user": proc.username(), "cmdline": proc.cmdline()}
    except psutil.Error:
        return {"pid": proc.pid, "user": None, "cmdline": []}


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


def _check_msg(to_stop: list, to_kill: list, left: list, unit: bool, pidfile: bool) -> str:
    parts = []
    if unit:
        parts.append("would stop the unit")
    if to_stop:
        parts.append(f"would stop {len(to_stop)} managed process(es) {[p.pid for p in to_stop]}")
    if to_kill:
        parts.append(f"would stop {len(to_kill)} named foreign holder(s) {[p.pid for p in to_kill]}")
    if pidfile and not parts:
        parts.append("would remove the stale pidfile")
    if not parts:
        parts.append("nothing to stop")
    msg = "; ".join(parts)
    if left:
        msg += f"; would leave {len(left)} foreign holder(s) alone: {describe_holders(left)}"
    return msg


if __name__ == "__main__":
    main(ARGS, run)
