"""Keep a program running without systemd (a container, CI): node_exporter, Prometheus, the monitor agent.

state started: start it unless the process its pidfile proves ours runs with the same argv, environment and
checksum (a different one restarts it); stopped: stop it (SIGTERM, SIGKILL after stop_timeout_s) and forget its
pidfile; restarted: stop if running, start; reloaded: SIGHUP to it (Prometheus and node_exporter re-read their
configuration), started when it is not running. A start waits up to start_timeout_s until the process is alive
and, with `port`, until port_host:port accepts a connection; a process that exits or does not answer fails the
task quoting its log. The pidfile (<dfp_root>/run/NAME.pid) records PID, start time and command line: a PID
reused by another process is never signalled (a warning names it), only forgotten. Files: <dfp_root>/run/NAME.pid,
NAME.daemon.json (the request), <dfp_root>/logs/NAME.log. The steps are dflash_host/host/daemon.py's.
tests/library/test_daemon.py runs real processes through it.
"""

from __future__ import annotations

from dflash_host.host import daemon
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "name": {"type": "str", "required": True, "help": "the daemon's name: its pidfile run/NAME.pid and log logs/NAME.log"},
    "argv": {"type": "list", "default": None, "help": "the program and its arguments (started, restarted, reloaded)"},
    "state": {"type": "str", "default": "started", "choices": ["started", "stopped", "restarted", "reloaded"],
              "help": "started/stopped: only when it is not so already; restarted: always; reloaded: SIGHUP"},
    "environment": {"type": "dict", "default": {}, "help": "variables added to the task's environment for the program"},
    "checksum": {"type": "str", "default": None, "help": "any text (a config's checksum): a different one restarts it"},
    "port": {"type": "int", "default": None, "help": "a start waits until port_host:port accepts a connection"},
    "port_host": {"type": "str", "default": "127.0.0.1", "help": "where the port is checked"},
    "start_timeout_s": {"type": "float", "default": 30.0, "help": "how long a start waits for the process and port"},
    "stop_timeout_s": {"type": "float", "default": 10.0, "help": "SIGTERM, then SIGKILL after this many seconds"},
    "root": {"include": "dfp_root", "help": "dfp_root: the pidfile and the log lie inside it"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name", "argv", "environment", "root")


def _start(p: dict, args: dict, wanted: dict, ctx: Context) -> dict:
    if not args["argv"]:
        raise ModuleError(f"daemon {args['name']}: argv is empty; give the program and its arguments")
    proc = daemon.spawn(p, wanted["argv"], wanted["environment"])
    try:
        seconds = daemon.wait_up(proc, p, args["port"], args["port_host"], args["start_timeout_s"])
    except ModuleError:
        daemon.stop(p, daemon.inspect(p["pidfile"])["procs"], args["stop_timeout_s"], ctx)
        raise
    daemon.remember(p, wanted)
    return {"pid": proc.pid, "start_seconds": seconds}


def _warn_refused(found: dict, ctx: Context) -> None:
    for r in found["refused"]:
        ctx.warn(f"PID {r['pid']} of the pidfile is not the daemon the tool started ({r['reason']}); it was not "
                 "signalled, and the pidfile is forgotten")


def run(args: dict, ctx: Context) -> dict:
    p = daemon.places(args["root"], args["name"])
    found = daemon.inspect(p["pidfile"])
    _warn_refused(found, ctx)
    state, running = args["state"], found["pid"] is not None
    wanted = daemon.request(args["argv"] or [], args["environment"] or {}, args["checksum"])
    result = {"name": args["name"], "state": state, "pidfile": p["pidfile"], "log": p["log"], "pid": found["pid"]}
    if state == "stopped":
        if not running:
            if not ctx.check:
                daemon.stop(p, [], args["stop_timeout_s"], ctx)  # forget a stale pidfile
            return {**result, "changed": False}
        if not ctx.check:
            result["stop"] = daemon.stop(p, found["procs"], args["stop_timeout_s"], ctx)
        return {**result, "changed": True, "pid": None}
    same = running and daemon.recorded_request(p["record"]) == wanted
    if state == "started" and same:
        return {**result, "changed": False}
    if state == "reloaded" and same:  # asked for another program: restarted below instead
        if not ctx.check:
            daemon.reload(found["pid"])
        return {**result, "changed": True, "reloaded": True}
    if ctx.check:
        return {**result, "changed": True}
    if running:
        result["stop"] = daemon.stop(p, found["procs"], args["stop_timeout_s"], ctx)
    return {**result, **_start(p, args, wanted, ctx), "changed": True}


if __name__ == "__main__":
    main(ARGS, run)
