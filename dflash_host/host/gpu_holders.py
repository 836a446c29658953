"""Who holds GPU memory, and which of those holders the tool may stop.

A holder is a process nvidia-smi lists as a compute app, or (when that list is empty or names PIDs this
namespace cannot see, while memory is used) one with an NVIDIA device node open. The tool's own holders
are proven by the pidfile or the unit (dflash_host/host/processes.py, gpu_cleanup); every other one is foreign
and is stopped only when named in kill_foreign by exact PID or exact command line, and only when it
belongs to this user (or allow_other_users). Never by a name pattern.
"""

from __future__ import annotations

import os

import psutil

from dflash_host.host.gpus import busy, query_compute_apps, scan_device_fds
from dflash_host.module import ModuleError

KILL_FOREIGN = "gpu_cleanup_kill_foreign"  # the variable a person sets (named in every reason given)
ENTRY_KEYS = ("pid", "user", "cmdline", "mib", "gpu", "source", "devices", "process_name")


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


def play_uids() -> set:
    """The users the play runs as: this process's, and under sudo (become) also the login user's, whose
    processes (a server started before the play used become) are the operator's own, not another user's.
    SUDO_UID is set by sudo itself and believed only when sudo made us root."""
    uids = {os.geteuid()}
    sudo_uid = os.environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and os.getuid() == 0 and sudo_uid.isdigit():
        uids.add(int(sudo_uid))
    return uids


def foreign_decision(
    pid: int, cmdline: list, uid: int | None, my_uid, kill_pids: set, kill_cmds: set, allow_other_users: bool
) -> tuple[bool, str]:
    """Whether a holder the tool does not manage may be stopped, and why (or why not). `my_uid`: a uid or a
    set of them (play_uids)."""
    named = pid in kill_pids or (bool(cmdline) and " ".join(" ".join(cmdline).split()) in kill_cmds)
    if not named:
        return False, f"not managed by this tool and not named in {KILL_FOREIGN}"
    if uid is None:
        return False, f"named in {KILL_FOREIGN}, but its owner cannot be read here"
    mine = {my_uid} if isinstance(my_uid, int) else set(my_uid)
    if uid not in mine and not allow_other_users:
        return False, (
            f"named in {KILL_FOREIGN}, but it belongs to another user; set gpu_cleanup_allow_other_users: true to stop it"
        )
    return True, f"named in {KILL_FOREIGN}"


def classify(holders: list, ours: set, notes: dict, decide) -> tuple[list, list]:
    """Every holder that is not ours as a report entry with action stop/left/gone and its reason, and the
    processes to stop. `decide(holder) -> (ok, reason)`; `notes` {pid: why the pidfile did not prove it}."""
    foreign, to_kill = [], []
    for h in holders:
        if h["pid"] in ours:
            continue
        ok, reason = decide(h)
        reason += "".join(f"; {why}" for why in notes.get(h["pid"], []))
        entry = {k: h.get(k) for k in ENTRY_KEYS}
        entry.update(action="stop" if ok else "left", reason=reason)
        foreign.append(entry)
        if ok:
            try:
                to_kill.append(psutil.Process(h["pid"]))
            except psutil.Error:
                entry["action"] = "gone"
    return foreign, to_kill


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
        # vLLM's process titles (setproctitle: "VLLM::EngineCore" padded with spaces over the old argv) read
        # as one word and a run of blanks: one space between words, as ps shows them.
        cmd = " ".join(" ".join(h.get("cmdline") or []).split()) or h.get("process_name") or "?"
        if len(cmd) > 120:
            cmd = cmd[:117] + "..."
        parts.append(f"pid {h['pid']} (user {h.get('user') or '?'}, {gpu}, {mib}): {cmd}")
    return "; ".join(parts)


def proc_info(pid: int) -> dict:
    """{visible, user, uid, cmdline} of a PID; another user's command line may be unreadable."""
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


def find_holders(cmd: str | None, gpus: list, indices: list, threshold_mib: int, prefix: str | None) -> tuple[list, dict]:
    """GPU holders: nvidia-smi's compute apps; plus a /proc fd scan when that list is empty (or names
    PIDs this namespace cannot see) while memory is used. Returns (holders, fd_scan report)."""
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    holders = [
        {
            "pid": app["pid"],
            "process_name": app["process_name"],
            "mib": app["used_mib"],
            "gpu": by_uuid.get(app["gpu_uuid"]),
            "source": "nvidia-smi",
            **proc_info(app["pid"]),
        }
        for app in query_compute_apps(cmd)
    ]
    hidden = not holders or any(not h["visible"] for h in holders)
    scan: dict = {"used": False, "holders": {}, "unreadable": 0}
    if hidden and busy(gpus, indices, threshold_mib):
        found, denied = scan_device_fds(prefix)
        scan = {"used": True, "holders": {str(pid): devs for pid, devs in sorted(found.items())}, "unreadable": denied}
        listed = {h["pid"] for h in holders}
        for pid, devices in sorted(found.items()):
            if pid not in listed:
                holders.append(
                    {"pid": pid, "process_name": None, "mib": None, "gpu": None, "source": "fd-scan", "devices": devices,
                     **proc_info(pid)}
                )
    return holders, scan
