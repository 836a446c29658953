"""The running vLLM server: by mode (a detached process session with a pidfile, or a systemd unit), and
watched while it starts or is verified.

Both modes answer the same calls (inspect, stop, spawn, exit_code, ready); server_for picks one from the
rendered launch. vllm.server starts and stops through them, vllm.status only inspects.

Watching: every poll looks at the process and the new log lines before the readiness probe, so a server
that dies, or logs a fatal line, fails the wait within about a second, quoting the first exception
(ServerFailed). Follower reads only the lines after the start marker naming the server's PID; Watch
runs the readiness steps (tenacity) under the readiness budget (vllm.ready).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import TYPE_CHECKING, Any, Callable

import psutil
import tenacity

from dflash_host.host import systemd
from dflash_host.host.processes import (
    alive,
    examine,
    managed_processes,
    read_pidfile,
    stop_processes,
    update_pidfile_tree,
    write_pidfile,
)
from dflash_host.module import ModuleError
from dflash_host.vllm.log import LogTail, fatal_label, find_fatal, first_exception, marker_line, parse_marker, root_cause

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

POLL_S = 0.1  # process and log are polled this often while waiting
RUNNING_STATES = systemd.RUNNING_STATES


class ProcessServer:
    """A detached process session with a pidfile (no systemd)."""

    def __init__(self, launch: dict, p: dict) -> None:
        self.launch, self.p = launch, p
        self.popen: subprocess.Popen | None = None
        self.pid: int | None = None

    def inspect(self) -> dict:
        record = read_pidfile(self.p["pidfile"])
        if record is None:
            return {"alive": False, "pid": None, "procs": []}
        found = examine(record)
        procs = [x for x in found["managed"] if alive(x)]
        top = any(x.pid == record["pid"] for x in procs)
        return {"alive": top, "pid": record["pid"] if top else None, "procs": procs, "refused": found["refused"]}

    def session_members(self) -> list:
        """Processes of the session this invocation started (setsid: sid = the spawned PID).

        Proof of ownership without the pidfile: until this process reaps its child the PID cannot be
        reused, and Linux never hands out a PID still in use as a session id, so while any member of
        session `self.pid` lives, it is the one we created.
        """
        if self.pid is None:
            return []
        out = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == self.pid and alive(proc):
                    out.append(proc)
            except (OSError, psutil.Error):
                continue
        return out

    def stop(self, ctx: Context, grace_s: float) -> dict | None:
        record = read_pidfile(self.p["pidfile"])
        out = None
        procs = managed_processes(record) if record is not None else []
        known = {x.pid for x in procs}
        procs += [x for x in self.session_members() if x.pid not in known]
        if procs:
            out = stop_processes(procs, grace_s, ctx)
            if out["survivors"]:
                raise ModuleError(
                    f"processes {out['survivors']} of the vLLM server survived SIGKILL; "
                    "check them (uninterruptible I/O?) before starting again",
                    stop=out,
                )
        if self.popen is not None:
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return out

    def spawn(self, env: dict) -> int:
        log = self.launch["log"]
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        launch_id, stamp = self.launch["launch_id"], time.strftime("%Y-%m-%dT%H:%M:%S%z")

        def write_marker() -> None:  # runs in the child after setsid, before exec: names the new PID
            os.write(1, (marker_line(os.getpid(), launch_id, stamp) + "\n").encode())

        try:
            self.popen = subprocess.Popen(
                self.launch["argv"],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.launch.get("workdir") or None,
                start_new_session=True,
                close_fds=True,
                preexec_fn=write_marker,
            )
        except OSError as exc:
            raise ModuleError(
                f"cannot start {self.launch['argv'][0]}: {exc.strerror}; check venv_python (the venv role builds it)"
            )
        finally:
            os.close(fd)
        self.pid = self.popen.pid
        try:
            write_pidfile(self.p["pidfile"], psutil.Process(self.pid))
        except (psutil.Error, ModuleError) as exc:
            if self.popen.poll() is None:  # it runs, and no pidfile would record it: start() stops it
                why = exc.msg if isinstance(exc, ModuleError) else str(exc)
                raise ModuleError(f"the new server (PID {self.pid}) could not be recorded in its pidfile: {why}") from None
            # it exited already: the readiness watch reports that with the log
        return self.pid

    def exit_code(self) -> int | None:
        """None while the top process runs; its exit status once it has ended."""
        if self.popen is not None:
            return self.popen.poll()
        if self.pid is None:
            return -1
        try:
            proc = psutil.Process(self.pid)
            return None if alive(proc) else -1
        except psutil.Error:
            return -1

    def ready(self) -> None:
        try:
            update_pidfile_tree(self.p["pidfile"])
        except ModuleError:
            pass


class SystemdServer:
    """A systemd unit (KillMode=control-group); the unit's MainPID is the process watched."""

    def __init__(self, launch: dict, p: dict) -> None:
        self.launch, self.p = launch, p
        self.name = launch["service_name"]
        self.pid: int | None = None

    def show(self) -> dict:
        return systemd.show(self.name, ("ActiveState", "MainPID", "ExecMainStatus", "LoadState"), check=False)

    def inspect(self) -> dict:
        st = self.show()
        pid = systemd.main_pid(st) or None
        running = st.get("ActiveState") in RUNNING_STATES and pid is not None
        return {"alive": running, "pid": pid if running else None, "procs": []}

    def stop(self, ctx: Context, grace_s: float) -> dict | None:
        st = self.show()
        if st.get("LoadState") == "not-found" or st.get("ActiveState") in ("inactive", "failed", None):
            return None
        systemd.stop(self.name, grace_s)
        return {"stopped": [{"unit": self.name}]}

    def spawn(self, env: dict) -> int:
        systemd.unit_command("restart", self.name)
        for _ in range(100):
            st = self.show()
            pid = systemd.main_pid(st)
            if pid:
                self.pid = pid
                return pid
            if st.get("ActiveState") == "failed":
                break
            time.sleep(POLL_S)
        raise ModuleError(f"systemd did not start {self.name}; see `journalctl -u {self.name}` and {self.launch['log']}")

    def exit_code(self) -> int | None:
        st = self.show()
        if st.get("ActiveState") in RUNNING_STATES and systemd.main_pid(st) == self.pid:
            return None
        try:
            return int(st.get("ExecMainStatus") or -1)
        except ValueError:
            return -1

    def ready(self) -> None:
        pass


def server_for(launch: dict, p: dict) -> ProcessServer | SystemdServer:
    """The managed server of a rendered launch (its mode picks the kind): the one way to inspect, start and
    stop it (vllm.server, vllm.status, vllm.node, vllm.measurement; gpu_cleanup through stop_owner)."""
    return SystemdServer(launch, p) if launch.get("mode") == "systemd" else ProcessServer(launch, p)


def stop_owner(pidfile: str, ctx: Context, grace_s: float, unit: str | None = None) -> dict | None:
    """Stop the managed server through its owner when no launch is at hand (gpu_cleanup): the systemd unit `unit`,
    else the pidfile's process tree; the stop report (None when nothing ran)."""
    launch = {"mode": "systemd", "service_name": unit} if unit else {"mode": "process"}
    return server_for(launch, {"pidfile": pidfile}).stop(ctx, grace_s)


TREE_EVERY_S = 1.0  # how often the pidfile's process tree is refreshed while waiting
FATAL_SETTLE_S = 0.5  # after a fatal line, wait this long for the traceback to complete or the exit


class NotYet(Exception):
    """A readiness step is not there yet (retried until the budget runs out)."""


class ServerFailed(Exception):
    """The server died, logged a fatal line or never got ready: what happened and the log's root cause."""

    def __init__(self, what: str, root: list, exit_code: int | None) -> None:
        super().__init__(what)
        self.what, self.root, self.exit_code = what, root, exit_code

    def error(self, log: str, stopped: Any) -> ModuleError:
        """The module's failure: what happened, the root cause quoted from the log, and the fix."""
        root = " | ".join(self.root) if self.root else "(the log shows nothing after the start marker)"
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        tail = "; stopped what was left of it" if stopped else ""
        return ModuleError(
            f"vLLM failed: {self.what}{code}{tail}. Root cause (first exception) in {log}: {root}. "
            "Fix the cause (model, drafter config, flags, memory) and run again",
            start_failed=True,
            root_cause=self.root,
            exit_code=self.exit_code,
            log=log,
        )


class Follower:
    """The new server's log: the lines after the start marker that names its PID."""

    def __init__(self, path: str, pid: int) -> None:
        self.path, self.pid = path, pid
        self.tail: LogTail | None = None
        self.started = False
        self.lines: list = []

    @classmethod
    def from_now(cls, path: str, pid: int) -> Follower:
        """The lines a running server writes from now on (what it wrote before is checked separately)."""
        follower = cls(path, pid)
        follower.started = True
        try:
            follower.tail = LogTail(path, os.path.getsize(path))
        except OSError:
            pass  # no log at the path (deleted while the server runs): nothing new can be read
        return follower

    def poll(self) -> list:
        if self.tail is None:
            if not os.path.exists(self.path):
                return []
            self.tail = LogTail(self.path)
        new = []
        for line in self.tail.poll():
            if not self.started:
                mk = parse_marker(line)
                self.started = bool(mk and mk["pid"] == self.pid)
                continue
            new.append(line)
        self.lines.extend(new)
        return new

    def all_lines(self) -> list:
        """The lines read so far plus what the file holds beyond them (a crash's unterminated last line)."""
        if self.tail is not None:
            return self.lines + self.tail.all_lines()[len(self.tail.lines) :]
        return self.lines

    def close(self) -> None:
        if self.tail:
            self.tail.close()


class RunningServer:
    """A server an earlier run started, as Watch sees it: alive while its (proven) top process runs."""

    exit_code_known = False  # not our child: once it ends, its exit status cannot be read

    def __init__(self, pid: int) -> None:
        try:
            self.proc: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self.proc = None

    def exit_code(self) -> int | None:
        """None while it runs; -1 once it has ended."""
        return None if self.proc is not None and alive(self.proc) else -1

    def ready(self) -> None:
        """A verify changes nothing, not even the pidfile's tree."""


class Watch:
    """Fail fast: every poll looks at the process and the new log lines before the readiness probe."""

    def __init__(self, server: Any, follower: Follower, deadline: float, ctx: Context) -> None:
        self.server, self.follower, self.deadline, self.ctx = server, follower, deadline, ctx
        self.fatal_at: float | None = None
        self.fatal_line: str | None = None
        self.steps: dict = {}
        self.t0 = time.monotonic()
        self.tree_at = self.t0

    def check(self) -> None:
        """Raise ServerFailed when the process has exited or the log shows a fatal line."""
        if time.monotonic() - self.tree_at >= TREE_EVERY_S:
            self.tree_at = time.monotonic()
            self.server.ready()  # record EngineCore and workers in the pidfile as they appear
        new = self.follower.poll()
        if self.fatal_at is None:
            idx = find_fatal(new)
            if idx is not None:
                self.fatal_at, self.fatal_line = time.monotonic(), new[idx]
        code = self.server.exit_code()
        if code is not None:
            self._exited(code)
        if self.fatal_at is not None:
            settled = first_exception(self.follower.lines) is not None
            if settled or time.monotonic() - self.fatal_at >= FATAL_SETTLE_S:
                raise ServerFailed(
                    f"the log shows {fatal_label(self.fatal_line or '')} while the process still runs",
                    root_cause(self.follower.lines),
                    None,
                )

    def _exited(self, code: int | None) -> None:
        time.sleep(0.05)  # let the last lines reach the file
        self.follower.poll()
        if not getattr(self.server, "exit_code_known", True):  # not our child: no status to quote
            what, code = f"the vLLM process (PID {self.follower.pid}) exited", None
        else:
            what = f"the vLLM process exited with code {code}"
        if self.fatal_line:
            what += f" after {fatal_label(self.fatal_line)}"
        raise ServerFailed(what, root_cause(self.follower.all_lines()), code)

    def step(self, what: str, probe: Callable[[], Any]) -> Any:
        """Retry `probe` every POLL_S (tenacity) until it answers, the server fails, or the budget ends."""
        t = time.monotonic()
        self.ctx.say(f"vLLM: waiting for {what}")
        last: list = [""]
        try:
            for attempt in tenacity.Retrying(
                stop=tenacity.stop_after_delay(max(0.0, self.deadline - t)),
                wait=tenacity.wait_fixed(POLL_S),
                retry=tenacity.retry_if_exception_type(NotYet),
                reraise=True,
            ):
                with attempt:
                    self.check()
                    try:
                        value = probe()
                    except NotYet as exc:
                        last[0] = str(exc)
                        raise
                    self.steps[what] = round(time.monotonic() - self.t0, 2)
                    return value
        except NotYet:
            raise ServerFailed(
                f"vLLM was not ready within readiness_timeout_s ({self.deadline - self.t0:.0f} s): still waiting "
                f"for {what} ({last[0]})",
                root_cause(self.follower.lines, tail=5),
                None,
            ) from None
        return None

    def quote_the_failure(self, what: str, seconds: float = 1.5) -> None:
        """The server may be dying on the request just made: watch it briefly, so the failure quotes the log."""
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                self.check()
                time.sleep(POLL_S)
        except ServerFailed as exc:
            exc.what = f"{what}; {exc.what}"
            raise
