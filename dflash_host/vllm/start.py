"""Starting the managed vLLM server: a free port, the log rotated, the process spawned and recorded, then
proven ready (dflash_host.vllm.ready); a start that fails stops what it began and says why. A headless
node of a multi-node vLLM starts the same way, without a port of its own, ready at its launch line.

The server's environment is the environment file's (secrets included) plus a few variables inherited
from the worker (INHERIT_ENV), so that the runtime's PYTHONPATH never leaks into vLLM. Used by vllm.server and vllm.measurement.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from dflash_host.host.files import atomic_write
from dflash_host.module import ModuleError
from dflash_host.vllm.cluster import is_headless
from dflash_host.vllm.log import resolved_architectures, rotate
from dflash_host.vllm.probe import describe_owner, port_in_use, port_listeners
from dflash_host.vllm.process import Follower, ServerFailed, Watch
from dflash_host.vllm.ready import wait_until_launched, wait_until_ready
from dflash_host.vllm.records import dump, read_env, remove_tool_file

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

# Inherited from the worker's environment; everything else comes from the environment file.
INHERIT_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ")


def check_port_free(launch: dict) -> None:
    """Another program on the port would answer the probes for us: stop before anything is started."""
    if port_in_use(launch["host"], launch["port"]):
        owners = port_listeners(launch["port"])
        who = "; ".join(describe_owner(o) for o in owners) or "an unknown process"
        raise ModuleError(
            f"port {launch['port']} on {launch['host']} is already taken by {who}; nothing was started. Stop "
            "that program or choose another vllm_port",
            port=launch["port"],
            owners=owners,
        )


def rotate_log(launch: dict, ctx: Context) -> dict:
    """Rotate the server's log (only what is provably the tool's); name the look-alikes left alone."""
    log = launch["log"]
    rotation = rotate(log, launch["log_keep"], root=launch.get("root"))
    if rotation["foreign"]:
        ctx.warn(
            f"left {', '.join(rotation['foreign'])} alone: named like rotated logs of {log}, but not written by "
            "dflash-provision (no start marker); they are not pruned (remove them by hand if they are unwanted)"
        )
    return rotation


def server_env(p: dict) -> dict:
    """The environment the server starts with: INHERIT_ENV from the worker, then the environment file."""
    env = {k: os.environ[k] for k in INHERIT_ENV if k in os.environ}
    env.update(read_env(p))
    return env


def undo_start(launch: dict, p: dict, ctx: Context, server: Any) -> dict | None:
    """Stop what this start began (found by pidfile or, without one, by its session) and drop its records."""
    stopped = server.stop(ctx, launch["stop_grace_s"])
    remove_tool_file(p["running"], "running", False)
    if launch["mode"] != "systemd":
        remove_tool_file(p["pidfile"], "pidfile", False)
    return stopped


def spawn_recorded(launch: dict, p: dict, ctx: Context, server: Any, env: dict) -> int:
    """Spawn the server and record it (pidfile, running.json): the PID.

    When a record cannot be written (a full disk), what was spawned is stopped before the error: a
    server that no file records would hold the port and the GPU, and no later run could prove it ours.
    """
    try:
        pid = server.spawn(env)
        running = {
            "fingerprint": launch["fingerprint"],
            "pid": pid,
            "mode": launch["mode"],
            "log": launch["log"],
            "started_at": time.time(),
        }
        atomic_write(p["running"], dump(running), mode=0o644)
    except ModuleError as exc:
        stopped = undo_start(launch, p, ctx, server)
        undone = " (the process it had begun was stopped)" if stopped else ""
        raise ModuleError(f"vLLM was not started{undone}: {exc.msg}", **{**exc.data, "start_failed": True}) from None
    return pid


def start(launch: dict, p: dict, ctx: Context, server: Any) -> dict:
    """Rotate the log, launch, and watch until ready; on failure stop what was started and say why."""
    os.makedirs(os.path.dirname(launch["log"]), exist_ok=True)
    headless = is_headless(launch)
    if not headless:  # a headless node listens on no port of its own
        check_port_free(launch)
    rotation = rotate_log(launch, ctx)
    env = server_env(p)
    t_launch = time.monotonic()
    pid = spawn_recorded(launch, p, ctx, server, env)
    follower = Follower(launch["log"], pid)
    watch = Watch(server, follower, t_launch + launch["readiness_timeout_s"], ctx)
    try:
        if headless:
            figures = wait_until_launched(launch, watch)
        else:
            figures = wait_until_ready(launch, watch, env.get("VLLM_API_KEY"), ctx)
    except ServerFailed as exc:
        follower.close()
        stopped = undo_start(launch, p, ctx, server)
        raise exc.error(launch["log"], stopped) from None
    follower.close()
    ready_at = figures.pop("ready_at")
    figures.update(
        pid=pid,
        ready_s=round(ready_at - t_launch, 2),
        ready_at=figures.pop("ready_wall"),
        total_s=round(time.monotonic() - t_launch, 2),
        steps=watch.steps,
        rotated_log=rotation["rotated_to"],
        log=launch["log"],
        resolved_architectures=resolved_architectures(follower.lines),
    )
    return figures
