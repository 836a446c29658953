"""A long-running program the tool keeps running where systemd does not (a container, CI): node_exporter,
Prometheus, the monitor agent.

Ownership is dflash_host.host.processes': the pidfile `<root>/run/NAME.pid` records the process (PID, start
time, command line, boot id), so a PID reused by anything else is never signalled (examine() refuses it) and
a stale pidfile only means "not running". Beside it `<root>/run/NAME.daemon.json` records what was asked
(argv, environment, checksum): a different request restarts the program. The program runs in a session of its
own (setsid), its output appended to `<root>/logs/NAME.log`; a start waits, up to a deadline, until it is alive
(for a second; where a port is given, until it listens on that port, which accepts a connection: another program
holding the port does not count); a stop is SIGTERM, then SIGKILL after the
grace period (processes.stop_processes).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time

import psutil

from dflash_host.host.files import atomic_write, read_json
from dflash_host.host.paths import managed_path
from dflash_host.host.processes import alive, examine, read_pidfile, stop_processes, write_pidfile
from dflash_host.module import Context, ModuleError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
POLL_S = 0.1
LOG_TAIL_BYTES = 2000
SETTLE_S = 1.0  # a program without a port counts as started once it has stayed alive this long


def places(root: str, name: str) -> dict:
    """{pidfile, record, log} of the daemon NAME under dfp_root `root` (each checked to lie inside it)."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ModuleError(f"daemon name {name!r} is not a plain name (letters, digits, _ . -, up to 64); it names "
                          "the pidfile and the log: give a plain one")
    if not root:
        raise ModuleError("dfp_root is empty; the daemon's pidfile and log lie inside it: set dfp_root")
    root = os.path.expanduser(root)
    out = {"pidfile": os.path.join(root, "run", f"{name}.pid"), "record": os.path.join(root, "run", f"{name}.daemon.json"),
           "log": os.path.join(root, "logs", f"{name}.log")}
    for key, path in out.items():
        managed_path(path, key, root)
    return out


def request(argv: list, environment: dict, checksum: str | None) -> dict:
    """What a start was asked for; a different one next time restarts the program."""
    return {"argv": [str(a) for a in argv], "environment": {str(k): str(v) for k, v in sorted(environment.items())},
            "checksum": checksum}


def recorded_request(path: str) -> dict | None:
    """The request the running program was started with (None: none recorded, or unreadable: restart it)."""
    return read_json(path)


def inspect(pidfile: str) -> dict:
    """{"procs": the live processes proven ours, "pid": the top one's PID or None, "refused": [{pid, reason}]}: a
    recorded PID now held by another process (reused) is refused and never signalled."""
    record = read_pidfile(pidfile)
    if record is None:
        return {"procs": [], "pid": None, "refused": []}
    found = examine(record)
    procs = [p for p in found["managed"] if alive(p)]
    top = record["pid"] if any(p.pid == record["pid"] for p in procs) else None
    refused = [{"pid": r["pid"], "reason": r["reason"]} for r in found["refused"]]
    return {"procs": procs if top else [], "pid": top, "refused": refused}


def spawn(p: dict, argv: list, environment: dict) -> subprocess.Popen:
    """Start argv in a session of its own, output appended to the log, and record it in the pidfile."""
    os.makedirs(os.path.dirname(p["pidfile"]), exist_ok=True)
    os.makedirs(os.path.dirname(p["log"]), exist_ok=True)
    fd = os.open(p["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')} dflash-provision starts: {' '.join(argv)}\n".encode())
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=fd, stderr=subprocess.STDOUT,
                                env={**os.environ, **environment}, cwd=os.path.dirname(p["log"]),
                                start_new_session=True, close_fds=True)
    except OSError as exc:
        raise ModuleError(f"cannot start {argv[0]}: {exc.strerror}; check that it is installed (the program's "
                          "path in the task's argv)") from None
    finally:
        os.close(fd)
    try:
        write_pidfile(p["pidfile"], psutil.Process(proc.pid))
    except (psutil.Error, ModuleError):
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        raise ModuleError(f"{argv[0]} exited at once; its log {p['log']} says: {log_tail(p['log'])}") from None
    return proc


def listens(pid: int, port: int) -> bool:
    """Whether the process or one of its children listens on `port` (not another program that holds it)."""
    try:
        top = psutil.Process(pid)
        for proc in [top] + top.children(recursive=True):
            conns = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6 has only connections()
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr[1] == port for c in conns(kind="inet")):
                return True
    except psutil.Error:
        pass
    return False


def port_answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def wait_up(proc: subprocess.Popen, p: dict, port: int | None, host: str, deadline_s: float) -> float:
    """Seconds until the program is alive and (with a port) listening there and accepting connections; a
    ModuleError quoting the log when it exits or the deadline passes first."""
    t0, program = time.monotonic(), os.path.basename(p["pidfile"])[:-len(".pid")]
    while True:
        code = proc.poll()
        if code is not None:
            raise ModuleError(f"{program} exited with status {code} while starting; its log {p['log']} says: "
                              f"{log_tail(p['log'])}")
        if port is None and time.monotonic() - t0 >= SETTLE_S:  # no port: alive a while (not an import error)
            return round(time.monotonic() - t0, 3)
        if port is not None and listens(proc.pid, port) and port_answers(host, port):
            return round(time.monotonic() - t0, 3)
        if time.monotonic() - t0 > deadline_s:
            raise ModuleError(f"{program} did not answer on {host}:{port} within {deadline_s:g} s (it was "
                              f"stopped); its log {p['log']} says: {log_tail(p['log'])}. Check the port is free, or "
                              "raise start_timeout_s")
        time.sleep(POLL_S)


def log_tail(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - LOG_TAIL_BYTES))
            return fh.read().decode("utf-8", "replace").strip().replace("\n", " | ")[-LOG_TAIL_BYTES:]
    except OSError:
        return "(no log)"


def stop(p: dict, procs: list, grace_s: float, ctx: Context) -> dict | None:
    """Stop the proven processes (SIGTERM, SIGKILL after grace_s) and forget the pidfile and the record."""
    out = stop_processes(procs, grace_s, ctx) if procs else None
    if out and out["survivors"]:
        raise ModuleError(f"processes {out['survivors']} of {os.path.basename(p['pidfile'])} survived SIGKILL; check "
                          "them (uninterruptible I/O?) before starting again", stop=out)
    for path in (p["pidfile"], p["record"]):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return out


def reload(pid: int) -> None:
    """SIGHUP to the proven top process (Prometheus and node_exporter re-read their configuration on it)."""
    try:
        psutil.Process(pid).send_signal(signal.SIGHUP)  # psutil refuses a PID reused since it was checked
    except psutil.NoSuchProcess:
        raise ModuleError(f"process {pid} exited before it could be told to reload; run again to start it") from None


def remember(p: dict, wanted: dict) -> None:
    """Record what the running program was started with (recorded_request reads it back)."""
    atomic_write(p["record"], (json.dumps(wanted, indent=1) + "\n").encode(), mode=0o644)
