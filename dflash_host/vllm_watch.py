"""Watching a vLLM server while it starts or is verified: its process and the log lines it writes.

Every poll looks at the process and the new log lines before the readiness probe, so a server that
dies, or logs a fatal line, fails the wait within about a second, quoting the first exception
(ServerFailed). Follower reads only the lines after the start marker naming the server's PID; Watch
runs the readiness steps (tenacity) under the readiness budget. Used by vllm_ready.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable

import psutil
import tenacity

from dflash_host import proc as _proc
from dflash_host import vllm_log as VL
from dflash_host.module import ModuleError
from dflash_host.vllm_process import POLL_S

if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

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
        self.tail: VL.LogTail | None = None
        self.started = False
        self.lines: list = []

    @classmethod
    def from_now(cls, path: str, pid: int) -> Follower:
        """The lines a running server writes from now on (what it wrote before is checked separately)."""
        follower = cls(path, pid)
        follower.started = True
        try:
            follower.tail = VL.LogTail(path, os.path.getsize(path))
        except OSError:
            pass  # no log at the path (deleted while the server runs): nothing new can be read
        return follower

    def poll(self) -> list:
        if self.tail is None:
            if not os.path.exists(self.path):
                return []
            self.tail = VL.LogTail(self.path)
        new = []
        for line in self.tail.poll():
            if not self.started:
                mk = VL.parse_marker(line)
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
        return None if self.proc is not None and _proc.alive(self.proc) else -1

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
            idx = VL.find_fatal(new)
            if idx is not None:
                self.fatal_at, self.fatal_line = time.monotonic(), new[idx]
        code = self.server.exit_code()
        if code is not None:
            self._exited(code)
        if self.fatal_at is not None:
            settled = VL.first_exception(self.follower.lines) is not None
            if settled or time.monotonic() - self.fatal_at >= FATAL_SETTLE_S:
                raise ServerFailed(
                    f"the log shows {VL.fatal_label(self.fatal_line or '')} while the process still runs",
                    VL.root_cause(self.follower.lines),
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
            what += f" after {VL.fatal_label(self.fatal_line)}"
        raise ServerFailed(what, VL.root_cause(self.follower.all_lines()), code)

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
                VL.root_cause(self.follower.lines, tail=5),
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
