"""Kept connections, the daemon's side of a host: the held SSH connection (Held) and the workers on it (Worker),
read without threads of their own (the session that has a worker polls its channel; engine/connection/persist_daemon.py).

A worker's output travels as frames: a tag byte, a 4-byte big-endian length, the bytes (o stdout, e stderr,
x the reason its stream ended).
"""

from __future__ import annotations

import contextlib
import select
import struct
import threading
import time

from engine.connection.ssh_connect import SshConnection
from engine.connection.ssh_options import Hop, ProxyCommandSpec
from engine.connection.transport import _PAYLOAD

PENDING_MAX = 1 << 20  # bytes a worker's output is kept while no session has it
POLL_S = 0.5  # the longest wait between two reads of a channel (paramiko's pipe can miss a wakeup)


def hop_from_json(data: dict) -> Hop:
    """The Hop engine/connection/persist.py sent (dataclasses.asdict of it, `via` tagged by kind)."""
    via = data.pop("via", None)
    hop = Hop(**data)
    if isinstance(via, dict) and "command" in via:
        hop.via = ProxyCommandSpec(via["command"], via.get("cwd"))
    elif isinstance(via, dict):
        hop.via = hop_from_json(via)
    return hop


class Held:
    """One kept SSH connection (a host's, with the jump hosts it goes through): how many workers use it, since
    when none has. Counted under the daemon's lock; a retired one (replaced in the pool) closes with its last."""

    def __init__(self, conn: SshConnection, persist_s: float, lock: threading.Lock) -> None:
        self.conn = conn
        self.persist_s = persist_s
        self.workers = 0
        self.idle_since = time.monotonic()
        self.retired = False
        self._lock = lock

    def alive(self) -> bool:
        return self.conn.is_connected

    def free(self, last_used: float) -> None:
        """A worker of this connection ended; `last_used` is when a session last had it."""
        with self._lock:
            self.workers -= 1
            self.idle_since = max(self.idle_since, last_used)
            closing = self.retired and self.workers == 0
        if closing:
            self.conn.close()


class Worker:
    """A worker on one exec channel of a held connection (reserved for it by the caller). No thread of its own:
    the session that has it reads it (poll on the channel's fileno); while none does, the daemon's tick keeps
    what it writes (up to PENDING_MAX bytes) for the next session, so a worker that dies at once still says why."""

    def __init__(self, held: Held, start: str, timeout: float, pool_key: str) -> None:
        self.held = held
        self.pool_key = pool_key
        self.chan = held.conn.client.get_transport().open_session(timeout=timeout)
        try:
            self.chan.exec_command(start)
            self.chan.sendall(_PAYLOAD)
        except BaseException:
            self.chan.close()
            raise
        self.fd = self.chan.fileno()  # readable when stdout or stderr has data, or the channel closed
        self.pending = bytearray()  # frames written while no session had the worker
        self.ended = False
        self.idle_since = time.monotonic()
        self.taken = True  # a session has it (a new worker: the one that asked for it)
        self.reading = threading.Lock()  # the daemon's tick reads an idle worker's output under it
        self._closed = False

    def frames(self) -> bytes:
        """What the worker wrote since last asked, as frames (tag, 4-byte length, bytes: o stdout, e stderr, x the
        end); never blocks."""
        out = bytearray()
        at_end = self.chan.closed or self.chan.eof_received  # before reading: data may come just before the end
        for tag, ready, read in ((b"e", self.chan.recv_stderr_ready, self.chan.recv_stderr),
                                 (b"o", self.chan.recv_ready, self.chan.recv)):
            while ready():
                data = read(65536)
                out += frame(tag, data)
        if not self.ended and not out and at_end:
            self.ended = True
            self.chan.status_event.wait(1)  # sshd sends the exit status just after the end of output
            reason = f"the worker's stream ended (exit status {self._status()})".encode()
            out += frame(b"x", reason)
        return bytes(out)

    def _status(self):
        return self.chan.recv_exit_status() if self.chan.exit_status_ready() else "unknown"

    def keep_idle_output(self) -> None:
        """While idle: what the worker writes, kept for the next session (the end always, the rest up to a cap)."""
        data = self.frames()
        if data and (data.startswith(b"x") or len(self.pending) + len(data) <= PENDING_MAX):
            self.pending += data

    def ping(self, timeout: float) -> bool:
        """Whether the worker still answers (a kept connection may have died unseen): one small round trip."""
        try:
            self.chan.sendall(b'{"op": "ping", "id": "mux"}\n')
        except Exception:
            return False
        deadline = time.monotonic() + timeout
        seen = b""
        while not self.ended and b'"pong"' not in seen:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            readable([self.fd], min(left, POLL_S))  # read on every wake: paramiko's pipe can miss one (see engine/connection/persist_daemon.py _relay)
            for frame_tag, data in split_frames(self.frames()):
                if frame_tag == b"o":
                    seen += data
                elif frame_tag == b"e":
                    self.pending += frame(b"e", data)
        return not self.ended

    def close(self, last_used: float | None = None) -> None:
        """End the worker (its stdin closes, it exits, the kernel drops any lock it held); once."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.chan.close()
        self.held.free(time.monotonic() if last_used is None else last_used)


def frame(tag: bytes, data: bytes) -> bytes:
    return tag + struct.pack(">I", len(data)) + data


def readable(fds: list[int], timeout: float) -> list[int]:
    """Which of `fds` can be read within `timeout` seconds (poll: any descriptor number)."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(max(0.0, timeout) * 1000)]


def split_frames(data: bytes) -> list[tuple[bytes, bytes]]:
    out, i = [], 0
    while i < len(data):
        size = struct.unpack(">I", data[i + 1:i + 5])[0]
        out.append((data[i:i + 1], data[i + 5:i + 5 + size]))
        i += 5 + size
    return out
