"""The managed server's pidfile, and finding and stopping exactly the processes it proves are ours.

A PID alone proves nothing (PIDs are reused), and a process name proves less. A live process is ours
only when its PID, start time and command line match what the pidfile recorded, or when it descends
from such a process. The pidfile (JSON, written atomically):

    {"pid", "pgid", "sid", "start_time" (psutil create_time), "since_boot", "boot_id", "cmdline": [...],
     "tree": [{"pid", "start_time", "since_boot", "boot_id", "cmdline"}, ...]}

`since_boot` (seconds from boot to the start, /proc/<pid>/stat) and `boot_id` (the kernel's id of this
boot) identify a process whatever the wall clock does: `start_time` is boot time + ticks, and the boot
time moves whenever the clock is stepped (NTP after boot, a VM resumed from a pause), so a server would
otherwise stop being provably ours. Pidfiles without them (older versions) are checked by `start_time`.

`tree` records descendants seen after the start (update_pidfile_tree), so a child that double-forked
out of the process group, or was orphaned when its parent died, is still recognised as ours.
Stopping is by process group where the whole group is ours, and by each process always:
SIGTERM, a grace period, SIGKILL for what remains, then wait until every one is gone.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import time
from typing import Any

import psutil

from dflash_host.host.files import atomic_write, load_json
from dflash_host.module import ModuleError

# For records without since_boot: psutil's create_time is boot time + start ticks, and boot time moves
# when the wall clock is stepped. A reused PID would also need the same command line to pass within this window.
START_TIME_TOLERANCE_S = 1.0
# since_boot is a count of clock ticks (1/100 s): equal for the same process, whatever the clock did.
SINCE_BOOT_TOLERANCE_S = 0.005
POLL_S = 0.05
KILL_WAIT_S = 10.0


# ---------------------------------------------------------------- pidfile


def _garbage(path: str, what: str) -> ModuleError:
    return ModuleError(
        f"pidfile {path} is not a valid pidfile of this tool ({what}); no process was signalled. "
        "Check that nothing else writes to that path; if the server it named is stopped, delete the "
        "file (or point vllm_pidfile elsewhere) and run again",
        pidfile=path,
    )


def _check_entry(path: str, entry: Any, where: str) -> dict:
    if not isinstance(entry, dict):
        raise _garbage(path, f"{where} must be an object, got {type(entry).__name__}")
    pid = entry.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise _garbage(path, f"{where}.pid must be a positive integer, got {pid!r}")
    start = entry.get("start_time")
    if not isinstance(start, (int, float)) or isinstance(start, bool) or start <= 0:
        raise _garbage(path, f"{where}.start_time must be a positive number (seconds since the epoch), got {start!r}")
    cmdline = entry.get("cmdline")
    if not isinstance(cmdline, list) or not all(isinstance(a, str) for a in cmdline):
        raise _garbage(path, f"{where}.cmdline must be a list of strings, got {cmdline!r}")
    out = {"pid": pid, "start_time": float(start), "cmdline": list(cmdline)}
    since, boot = entry.get("since_boot"), entry.get("boot_id")
    if since is not None or boot is not None:  # both or neither: one alone proves nothing
        if not isinstance(since, (int, float)) or isinstance(since, bool) or since < 0:
            raise _garbage(path, f"{where}.since_boot must be a number of seconds >= 0, got {since!r}")
        if not isinstance(boot, str) or not boot:
            raise _garbage(path, f"{where}.boot_id must be the kernel's boot id (a string), got {boot!r}")
        out.update(since_boot=float(since), boot_id=boot)
    return out


def validate_record(data: Any, path: str) -> dict:
    """Check a parsed pidfile and return it normalised; ModuleError naming the bad field otherwise."""
    if not isinstance(data, dict):
        raise _garbage(path, f"top level must be a JSON object, got {type(data).__name__}")
    record = _check_entry(path, data, "the record")
    for key in ("pgid", "sid"):
        value = data.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            raise _garbage(path, f"{key} must be a positive integer, got {value!r}")
        record[key] = value
    tree = data.get("tree", [])
    if not isinstance(tree, list):
        raise _garbage(path, f"tree must be a list, got {type(tree).__name__}")
    record["tree"] = [_check_entry(path, e, f"tree[{i}]") for i, e in enumerate(tree)]
    return record


def read_pidfile(path: str) -> dict | None:
    """The pidfile's record, or None if there is no pidfile. ModuleError if it is garbage."""
    try:
        data = load_json(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ModuleError(f"pidfile {path} cannot be read: {exc}; fix its permissions", pidfile=path)
    except ValueError as exc:  # not UTF-8 (UnicodeDecodeError is one) or not JSON
        raise _garbage(path, f"not JSON: {exc}")
    return validate_record(data, path)


@functools.lru_cache(maxsize=1)
def boot_id() -> str | None:
    """The kernel's id of this boot (a reboot changes it); None where /proc does not tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def since_boot(pid: int) -> float | None:
    """Seconds from boot to the start of `pid` (/proc/<pid>/stat starttime), which no clock step moves."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        ticks = int(stat[stat.rindex(b")") + 2:].split()[19])  # field 22; the name (field 2) may hold spaces
    except (OSError, ValueError, IndexError):
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def describe(proc: psutil.Process) -> dict:
    """A tree entry for a live process: {pid, start_time, since_boot, boot_id, cmdline} (no since_boot and
    boot_id where /proc cannot tell them)."""
    with proc.oneshot():
        return _with_boot({"pid": proc.pid, "start_time": proc.create_time(), "cmdline": proc.cmdline()})


def _with_boot(entry: dict) -> dict:
    since, boot = since_boot(entry["pid"]), boot_id()
    if since is not None and boot is not None:
        entry.update(since_boot=since, boot_id=boot)
    return entry


def _write(path: str, record: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    atomic_write(path, (json.dumps(record, indent=1) + "\n").encode(), mode=0o644)


def write_pidfile(path: str, proc: psutil.Process) -> dict:
    """Record `proc` (the server's top process) and its current descendants; return the record."""
    try:
        record = describe(proc)
        record["pgid"] = os.getpgid(proc.pid)
        record["sid"] = os.getsid(proc.pid)
        record["tree"] = [describe(c) for c in _descendants([proc])]
    except (psutil.NoSuchProcess, ProcessLookupError):
        raise ModuleError(f"process {proc.pid} exited before its pidfile {path} could be written; see its log")
    _write(path, record)
    return record


# ---------------------------------------------------------------- identity


def mismatch(entry: dict, live: dict | None) -> str | None:
    """Why a live process is not the recorded one (None when it is). Pure: both sides are dicts.

    `live` is {pid, start_time, cmdline} read now, or None if the PID does not exist.
    """
    if live is None:
        return "no such process"
    if "since_boot" in entry and "since_boot" in live:
        return _cmdline_mismatch(entry, live) or _boot_mismatch(entry, live)  # another command says most
    if abs(float(live["start_time"]) - float(entry["start_time"])) > START_TIME_TOLERANCE_S:
        return (
            f"PID {entry['pid']} was reused: it started at {live['start_time']:.2f}, "
            f"the recorded process at {entry['start_time']:.2f}"
        )
    return _cmdline_mismatch(entry, live)


def _boot_mismatch(entry: dict, live: dict) -> str | None:
    if live["boot_id"] != entry["boot_id"]:
        return f"PID {entry['pid']} was reused: the host rebooted since the process was recorded"
    if abs(float(live["since_boot"]) - float(entry["since_boot"])) > SINCE_BOOT_TOLERANCE_S:
        return (
            f"PID {entry['pid']} was reused: it started {live['since_boot']:.2f} s after boot, "
            f"the recorded process {entry['since_boot']:.2f} s after boot"
        )
    return None


def _cmdline_mismatch(entry: dict, live: dict) -> str | None:
    if list(live["cmdline"]) != list(entry["cmdline"]):
        return f"PID {entry['pid']} runs {' '.join(live['cmdline'])!r}, the recorded process ran {' '.join(entry['cmdline'])!r}"
    return None


def _live(pid: int) -> tuple[psutil.Process | None, dict | None]:
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None, None
        return proc, describe(proc)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None, None
    except psutil.AccessDenied:
        # Another user's process: its start time is still readable; its command line may not be.
        try:
            proc = psutil.Process(pid)
            return proc, _with_boot({"pid": pid, "start_time": proc.create_time(), "cmdline": ["<access denied>"]})
        except psutil.Error:
            return None, None


def _descendants(roots: list[psutil.Process]) -> list[psutil.Process]:
    seen = {p.pid for p in roots}
    out = []
    for root in roots:
        try:
            children = root.children(recursive=True)
        except psutil.Error:
            continue
        for child in children:
            if child.pid not in seen:
                seen.add(child.pid)
                out.append(child)
    return out


def examine(record: dict) -> dict:
    """Sort the record's processes into proven ours and refused, with reasons.

    Returns {"managed": [psutil.Process], "refused": [{pid, reason, cmdline}],
    "unproven_group": [{pid, cmdline, reason}]}: anchors are the recorded processes that still match
    (pid + start time + command line); managed = anchors + their live descendants (which covers the
    members of the recorded process group whose ancestry leads to the record). Members of the
    recorded group that are neither are listed as unproven and never signalled.
    """
    anchors: list[psutil.Process] = []
    refused = []
    for i, entry in enumerate([record] + list(record.get("tree", []))):
        proc, live = _live(entry["pid"])
        why = mismatch(entry, live)
        if why is None and proc is not None:
            if all(a.pid != proc.pid for a in anchors):
                anchors.append(proc)
        elif live is not None:  # a live process that is not ours: say so, never touch it
            refused.append({"pid": entry["pid"], "reason": why, "cmdline": live["cmdline"], "top": i == 0})
    managed = anchors + _descendants(anchors)
    ours = {p.pid for p in managed}
    unproven = []
    pgid = record.get("pgid")
    if pgid:
        for proc in psutil.process_iter():
            if proc.pid in ours:
                continue
            try:
                if os.getpgid(proc.pid) != pgid or proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                unproven.append(
                    {
                        "pid": proc.pid,
                        "cmdline": proc.cmdline(),
                        "reason": f"in the recorded process group {pgid}, but its parent chain does not lead "
                        "to a recorded process and the pidfile tree does not list it",
                    }
                )
            except (psutil.Error, OSError):
                continue
    return {"managed": managed, "refused": refused, "unproven_group": unproven}


def managed_processes(record: dict) -> list[psutil.Process]:
    """The live processes that are provably ours (see examine)."""
    return examine(record)["managed"]


def update_pidfile_tree(path: str) -> dict:
    """Add the current descendants of the recorded processes to the pidfile's tree; drop entries
    whose process is gone. Rewrites the file only if something changed; returns the record."""
    record = read_pidfile(path)
    if record is None:
        raise ModuleError(f"pidfile {path} does not exist; the server was not started by this tool")
    found = examine(record)
    keep = []
    for entry in record["tree"]:
        if mismatch(entry, _live(entry["pid"])[1]) is None:
            keep.append(entry)
    known = {e["pid"] for e in keep} | {record["pid"]}  # all live and proven just now: a PID names one process
    for proc in found["managed"]:
        if proc.pid in known:
            continue
        try:
            keep.append(describe(proc))
        except psutil.Error:
            continue
        known.add(proc.pid)
    if keep != record["tree"]:
        record["tree"] = keep
        _write(path, record)
    return record


# ---------------------------------------------------------------- stopping


def alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie holds no memory; its parent just has not reaped it)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        return alive(psutil.Process(pid))
    except psutil.Error:
        return False


def protected_pids() -> set:
    """This process, its ancestors (the worker, sshd, a shell) and init: never signalled."""
    pids = {0, 1, os.getpid()}
    try:
        for parent in psutil.Process().parents():
            pids.add(parent.pid)
    except psutil.Error:
        pass
    return pids


def _group_members(pgid: int) -> set:
    members = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    members.add(int(entry))
            except OSError:
                continue
    return members


def whole_groups(procs: list[psutil.Process], own_pgid: int) -> list[int]:
    """Process groups every live member of which is in `procs` (so killpg hits only ours)."""
    pids = {p.pid for p in procs}
    groups = set()
    for proc in procs:
        try:
            groups.add(os.getpgid(proc.pid))
        except OSError:
            continue
    out = []
    for pgid in sorted(groups):
        if pgid in (0, 1, own_pgid):
            continue
        live = {m for m in _group_members(pgid) if _pid_alive(m)}
        if live and live <= pids:
            out.append(pgid)
    return out


def brief(proc: psutil.Process) -> dict:  # {pid, user, cmdline} for a report
    try:
        with proc.oneshot():
            return {"pid": proc.pid, "user": proc.username(), "cmdline": proc.cmdline()}
    except psutil.Error:
        return {"pid": proc.pid, "user": None, "cmdline": []}


def _signal(procs: list[psutil.Process], groups: list[int], sig: int, errors: list) -> set:
    """Send `sig`; return the PIDs that refused it (permission denied)."""
    denied = set()
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            errors.append(f"signal {sig} to process group {pgid}: {exc}")
    for proc in procs:
        try:
            proc.send_signal(sig)  # psutil refuses if the PID was reused meanwhile
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            pass
        except psutil.AccessDenied:
            denied.add(proc.pid)
            errors.append(f"signal {sig} to pid {proc.pid}: permission denied (it belongs to another user)")
    return denied


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = [p for p in procs if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(POLL_S)
        left = [p for p in left if alive(p)]
    return left


def stop_processes(procs: list, grace_s: float, ctx: Any = None, groups: bool = True) -> dict:
    """Stop exactly `procs` (proven ours by the caller): SIGTERM to each (and to their process groups
    when `groups` and every live member of a group is in `procs`), wait `grace_s`, SIGKILL what
    remains (plus descendants that appeared meanwhile), then wait until all are gone.

    Returns {"stopped": [{pid, user, cmdline}], "terminated": [pids that exited on SIGTERM],
    "killed": [pids that needed SIGKILL], "survivors": [pids still alive], "groups": [pgids],
    "skipped": [protected pids], "errors": [...], "seconds": float}. In check mode (`ctx.check`)
    nothing is signalled and "stopped" lists what would be.
    """
    t0 = time.monotonic()
    protect = protected_pids()
    unique: dict[int, psutil.Process] = {}
    skipped = []
    for proc in procs:
        if proc.pid in protect:
            skipped.append(proc.pid)
        elif proc.pid not in unique and alive(proc):
            unique[proc.pid] = proc
    targets = list(unique.values())
    result: dict[str, Any] = {
        "stopped": [brief(p) for p in targets],
        "terminated": [],
        "killed": [],
        "survivors": [],
        "groups": [],
        "skipped": skipped,
        "errors": [],
        "seconds": 0.0,
    }
    if not targets or (ctx is not None and getattr(ctx, "check", False)):
        return result
    own_pgid = os.getpgrp()
    pgids = whole_groups(targets, own_pgid) if groups else []
    result["groups"] = pgids
    if ctx is not None:
        ctx.say(f"SIGTERM to {len(targets)} process(es)" + (f", group(s) {pgids}" if pgids else ""))
    denied = _signal(targets, pgids, signal.SIGTERM, result["errors"])
    left = _wait_gone([p for p in targets if p.pid not in denied], grace_s)
    result["terminated"] = [p.pid for p in targets if p not in left and p.pid not in denied]
    result["survivors"] = sorted(denied)
    if left:
        # Children forked during shutdown are ours too (they descend from our processes).
        late = [c for c in _descendants(left) if c.pid not in unique and c.pid not in protect]
        left += late
        if ctx is not None:
            ctx.say(f"SIGKILL to {len(left)} process(es) still alive after {grace_s:g} s")
        kill_groups = [g for g in pgids if g in whole_groups(left, own_pgid)] if groups else []
        denied = _signal(left, kill_groups, signal.SIGKILL, result["errors"])
        result["killed"] = [p.pid for p in left if p.pid not in denied]
        still = _wait_gone([p for p in left if p.pid not in denied], KILL_WAIT_S)
        result["survivors"] = sorted(set(result["survivors"]) | denied | {p.pid for p in still})
    result["seconds"] = round(time.monotonic() - t0, 3)
    return result
