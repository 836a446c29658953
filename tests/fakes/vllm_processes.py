"""Test helpers around managed vLLM servers (real or stand-in): free ports, and every process a test's
servers left behind, found by the start markers in their logs and the session each server leads."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import psutil

_MARKER = re.compile(r"vLLM server start pid=(\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def started_pids(log_dir: Path) -> set:
    """PIDs of every server started with its log in log_dir (rotated logs too)."""
    pids: set = set()
    for f in Path(log_dir).glob("vllm.log*") if Path(log_dir).exists() else []:
        pids |= {int(m) for m in _MARKER.findall(f.read_text(errors="replace"))}
    return pids


def session_alive(sid: int) -> list:
    """Live (non-zombie) members of session `sid`: a server and everything it started."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


def kill_leftovers(log_dirs: list) -> list:
    """SIGKILL what the servers logged in log_dirs left alive; return those PIDs (a test then fails)."""
    leaked = [p for d in log_dirs for pid in started_pids(d) for p in session_alive(pid)]
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return leaked


def stop_started(popen: subprocess.Popen) -> None:
    """End a process a test started itself (by its own handle): SIGTERM, then SIGKILL after 20 s."""
    if popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(timeout=20)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=10)
