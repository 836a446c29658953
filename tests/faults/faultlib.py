"""Fault injectors and helpers of the liveness tests: a TCP proxy on loopback that can stop forwarding while it keeps
every connection open (a host whose network path went quiet), the real CLI as a subprocess, waits with bounds."""

from __future__ import annotations

import fcntl
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


class FreezableProxy:
    """127.0.0.1:port -> an sshd. freeze(): nothing is forwarded any more either way, the TCP connections stay open
    (the kernel still acknowledges, so neither end sees an error); cut(): every connection is closed, as a path
    that failed outright; thaw(): forwarding again (connections made from now on work)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.frozen = threading.Event()
        self._socks: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._socks += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                if self.frozen.is_set():
                    time.sleep(0.05)
                    continue
                if not select.select([src], [], [], 0.1)[0]:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except (OSError, ValueError):  # ValueError: select on a socket cut() closed
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def freeze(self) -> None:
        self.frozen.set()

    def thaw(self) -> None:
        self.frozen.clear()

    def cut(self) -> None:
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        self._socks.clear()

    def close(self) -> None:
        self.cut()
        self._listener.close()

    def host_vars(self, ssh_host, folder: Path) -> dict:
        """Inventory variables reaching `ssh_host` through this proxy, its host key checked as the proxy's address."""
        line = next(ln for ln in Path(ssh_host.known_hosts).read_text().splitlines()
                    if ln.startswith(f"[{ssh_host.address}]:"))
        known = folder / "proxy_known_hosts"
        known.write_text(f"[127.0.0.1]:{self.port} {' '.join(line.split()[1:])}\n")
        return dict(ssh_host.inventory_vars(), ansible_host="127.0.0.1", ansible_port=self.port,
                    ansible_ssh_known_hosts_file=str(known))


def cli(argv: list[str], report: Path | None = None) -> subprocess.Popen:
    """`python3 -m invoke ARGV...` as a person starts it (its own session: a signal reaches it alone)."""
    full = [sys.executable, "-m", "invoke", *argv] + (["--report", str(report)] if report else [])
    return subprocess.Popen(full, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, within: float) -> str:
    """The CLI's output once it ended; a failure (after killing it) when it runs longer than `within` seconds."""
    try:
        return proc.communicate(timeout=within)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        out = proc.communicate()[0]
        raise AssertionError(f"the run did not end within {within:g} s; its output:\n{out}") from None


def wait_until(what: str, ok, within: float) -> None:
    deadline = time.monotonic() + within
    while not ok():
        assert time.monotonic() < deadline, f"timed out after {within:g} s waiting for {what}"
        time.sleep(0.05)


def alive(token: str) -> list[psutil.Process]:
    """Live processes (not zombies) whose command line holds `token`."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if token in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def lock_free(path: Path) -> bool:
    """Whether nobody holds the host lock's flock (this process takes it for a moment to know)."""
    if not path.exists():
        return True
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def report_rows(report: Path, task: str | None = None) -> list[dict]:
    rows = json.loads(report.read_text())["tasks"]
    return [r for r in rows if task is None or r["task"] == task]
