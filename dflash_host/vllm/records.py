"""The files beside the managed server's pidfile, and how each proves it is the tool's.

NAME.pid (the pidfile, dflash_host.host.processes), NAME.launch.json (the rendered launch), NAME.running.json
(what was started, when), NAME.env (the 0600 environment file) and the systemd unit: vllm_server
writes and removes them, vllm_status reads them. NAME.torndown.json is what teardown leaves in their place
(when, what was served where): a torn-down host is a known state, not "never provisioned". Only a file the tool provably wrote (by its content:
a valid record, the record's fields, the header line) is ever overwritten or removed.

A launch record is read only by read_launch (one rule: the tool's, or None); load_launch is its form for a step
that cannot go on without one.
"""

from __future__ import annotations

import json
import os
import time

from dflash_host.host.files import atomic_write, read_bytes, read_json
from dflash_host.host.processes import read_pidfile
from dflash_host.module import ModuleError
from dflash_host.vllm.process import server_for


def paths(pidfile: str) -> dict:
    folder = os.path.dirname(os.path.abspath(pidfile))
    stem = os.path.splitext(os.path.basename(pidfile))[0]
    return {
        "pidfile": os.path.abspath(pidfile),
        "launch": os.path.join(folder, f"{stem}.launch.json"),
        "running": os.path.join(folder, f"{stem}.running.json"),
        "env": os.path.join(folder, f"{stem}.env"),
        "torndown": os.path.join(folder, f"{stem}.torndown.json"),
    }


def dump(data: dict) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


# What the tool writes, and how each kind of file proves it is the tool's (the env file and the unit
# start with vllm.systemd_unit's "# Managed by dflash-provision" header line).
TOOL_HEADER = b"# Managed by dflash-provision"
RECORD_KEYS = {
    "launch": {"fingerprint", "launch_id", "argv", "env_file", "mode"},
    "running": {"fingerprint", "pid", "mode", "started_at"},
    "torndown": {"torn_down_at", "served_model_name", "port"},
}


def is_tool_file(path: str, kind: str) -> bool:
    """Whether the regular file at `path` (never a symlink) is one the tool wrote, judged by its content."""
    if kind == "launch":
        return read_launch(path) is not None
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    if kind == "pidfile":
        try:
            return read_pidfile(path) is not None
        except ModuleError:
            return False
    if kind in RECORD_KEYS:
        return RECORD_KEYS[kind] <= set(read_json(path) or {})
    return (read_bytes(path) or b"").startswith(TOOL_HEADER)  # env, unit


def remove_tool_file(path: str, kind: str, check: bool, foreign: list | None = None) -> bool:
    """Remove `path` if it is the tool's; a file that is not is left alone and appended to `foreign`."""
    if not os.path.lexists(path):
        return False
    if not is_tool_file(path, kind):
        if foreign is not None:
            foreign.append(path)
        return False
    if not check:
        os.unlink(path)
    return True


def read_launch(path: str) -> dict | None:
    """The launch record at `path` (NAME.launch.json beside a pidfile: the configured server's or a measurement
    server's), or None. The one reader of launch records, with one rule: the record is the tool's when it is a
    regular file (never a symlink) holding a JSON object with the launch's fields (RECORD_KEYS); a file that is
    missing, unreadable, not JSON or of another shape is no launch at all, never an error here. Whoever needs a
    launch to go on says so (load_launch); whoever only looks (status, the speed record) reads None as "none here".
    tests/dflash_host/test_one_reader.py keeps every other read of it out."""
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    launch = read_json(path)
    return launch if launch is not None and RECORD_KEYS["launch"] <= set(launch) else None


def load_launch(p: dict) -> dict:
    """The rendered launch beside the pidfile (read_launch), or a ModuleError saying how to render one."""
    launch = read_launch(p["launch"])
    if launch is None:
        raise ModuleError(
            f"no rendered launch at {p['launch']}; provision the host first: `invoke provision`, or "
            "`invoke serving-cluster --group GROUP` for a node of a serving cluster"
        )
    return launch


def launch_state(launch: dict, p: dict, want: str | None = None) -> dict:
    """Whether the running server is the rendered launch: {server, now (its inspect), running (running.json),
    want, fresh}. Fresh: alive, started from `want` (default: the launch's fingerprint) as the recorded PID.
    vllm_server decides restarts by it, library/vllm_cluster reports it (probe's `current`)."""
    server = server_for(launch, p)
    now = server.inspect()
    running = read_json(p["running"]) or {}
    want = want or launch["fingerprint"]
    fresh = bool(now["alive"] and running.get("fingerprint") == want and running.get("pid") == now["pid"])
    return {"server": server, "now": now, "running": running, "want": want, "fresh": fresh}


def record_teardown(p: dict, launch: dict) -> None:
    """Leave NAME.torndown.json where teardown removed the launch files, so that `invoke status` can tell a host
    torn down (not running: 3, as systemctl says of a stopped unit) from one never provisioned (unknown: 4)."""
    record = {"torn_down_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "served_model_name": launch.get("served_model_name"),
              "port": launch.get("port"), "host": launch.get("host"), "mode": launch.get("mode"),
              "cluster_group": (launch.get("cluster") or {}).get("group")}
    atomic_write(p["torndown"], dump(record))


def torn_down(p: dict) -> dict | None:
    """The teardown record beside the pidfile when it is the tool's, else None."""
    return read_json(p["torndown"]) if is_tool_file(p["torndown"], "torndown") else None


def read_env(p: dict) -> dict:
    raw = read_bytes(p["env"])
    return parse_env_file(raw.decode("utf-8")) if raw is not None else {}


def files_to_remove(p: dict, launch: dict, absent: bool, foreign: list) -> list:
    """(path, kind) of what stopping (or, with absent, removing) leaves behind; a misnamed unit goes to `foreign`."""
    files = [(p["running"], "running")]
    if launch["mode"] != "systemd" or absent:
        files.append((p["pidfile"], "pidfile"))
    unit_path = launch.get("unit_path")
    if absent:
        files += [(p["launch"], "launch"), (p["env"], "env")]
    if absent and unit_path:
        # the unit the tool renders is UNIT_DIR/SERVICE_NAME.service; a launch naming another file is not believed
        if os.path.basename(unit_path) == f"{launch.get('service_name')}.service":
            files.append((unit_path, "unit"))
        elif os.path.lexists(unit_path):
            foreign.append(unit_path)
    return files


def _env_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`") + '"'


def render_env_file(env: dict) -> str:
    """KEY="value" lines, readable by systemd's EnvironmentFile= and by parse_env_file."""
    lines = ["# Managed by dflash-provision (vllm-service role): the vLLM server's environment. Mode 0600."]
    lines += [f"{k}={_env_quote(v)}" for k, v in sorted(env.items())]
    return "\n".join(lines) + "\n"


def parse_env_file(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
            raw, value, i = value[1:-1], "", 0
            while i < len(raw):
                if raw[i] == "\\" and i + 1 < len(raw):
                    value += raw[i + 1]
                    i += 2
                else:
                    value += raw[i]
                    i += 1
        out[key.strip()] = value
    return out
