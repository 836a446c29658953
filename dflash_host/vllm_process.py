"""The managed vLLM server by mode: a detached process session with a pidfile, or a systemd unit.

Both answer the same calls (inspect, stop, spawn, exit_code, ready); server_for picks one from the
rendered launch. vllm_server starts and stops through them, vllm_status only inspects.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import TYPE_CHECKING

import psutil

from dflash_host import proc as _proc
from dflash_host import systemd
from dflash_host.module import ModuleError
from dflash_host.vllm_log import marker_line

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
        record = _proc.read_pidfile(self.p["pidfile"])
        if record is None:
            return {"alive": False, "pid": None, "procs": []}
        found = _proc.examine(record)
        procs = [x for x in found["managed"] if _proc.alive(x)]
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
                if os.getsid(proc.pid) == self.pid and _proc.alive(proc):
                    out.append(proc)
            except (OSError, psutil.Error):
                continue
        return out

    def stop(self, ctx: Context, grace_s: float) -> dict | None:
        record = _proc.read_pidfile(self.p["pidfile"])
        out = None
        procs = _proc.managed_processes(record) if record is not None else []
        known = {x.pid for x in procs}
        procs += [x for x in self.session_members() if x.pid not in known]
        if procs:
            out = _proc.stop_processes(procs, grace_s, ctx)
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
            _proc.write_pidfile(self.p["pidfile"], psutil.Process(self.pid))
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
            return None if _proc.alive(proc) else -1
        except psutil.Error:
            return -1

    def ready(self) -> None:
        try:
            _proc.update_pidfile_tree(self.p["pidfile"])
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
        alive = st.get("ActiveState") in RUNNING_STATES and pid is not None
        return {"alive": alive, "pid": pid if alive else None, "procs": []}

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
    stop it (vllm_server, vllm_status, and gpu_processes stopping the tool's server)."""
    return SystemdServer(launch, p) if launch.get("mode") == "systemd" else ProcessServer(launch, p)
