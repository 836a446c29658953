"""The holder of kept connections (ControlPersist): one process per control-node user and code version that keeps
each host's SSH connection and an idle worker on it between runs, so a later run costs the host neither a login
nor a python start.

Started by engine/persist.py on the first run that asks for it (`-o ControlMaster=auto -o ControlPersist=60s`);
it listens on a unix socket in a 0700 folder of the user's and answers only its own user (SO_PEERCRED). One
socket connection is one session with one host's worker:

  client -> {"hop": HOP, "start": CMD, "pool": KEY, "persist_s": S}   (one line; HOP as engine/persist.py sends it)
  daemon -> {"ok": true, "reused": bool} | {"error": MSG, "kind": "refused" | "user" | "transient"}
  then the worker's protocol, relayed: what the client writes goes to the worker's stdin as it is; what the
  worker writes comes back in frames of a tag byte, a 4-byte big-endian length and the bytes: b"o" its stdout,
  b"e" its stderr, b"x" the reason its stream ended.

A session hands its worker back for a later one only when it ends with the worker's `release` answered and then
{"mux": "keep"}; any other end (the client died, the connection broke, a request still out) closes the worker's
channel, so the worker exits and the kernel drops the host lock, as when a run's own connection closes.
A request is never sent twice: what the client writes goes to the worker once, or the session ends.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import stat
import struct
import sys
import threading
import time
from typing import Callable

from engine.errors import HostUnreachable, UserError
from engine.ssh_connect import SshConnection, _open_hop, _socket_for
from engine.ssh_options import Hop, ProxyCommandSpec
from engine.transport import _PAYLOAD, chunks

KEEP_LINE = b'{"mux": "keep"}\n'
MAX_FIRST_LINE = 1 << 20
TICK_S = 0.5


def hop_from_json(data: dict) -> Hop:
    """The Hop engine/persist.py sent (dataclasses.asdict of it, `via` tagged by kind)."""
    via = data.pop("via", None)
    hop = Hop(**data)
    if isinstance(via, dict) and "command" in via and len(via) == 1:
        hop.via = ProxyCommandSpec(via["command"])
    elif isinstance(via, dict):
        hop.via = hop_from_json(via)
    return hop


class Held:
    """One kept SSH connection (a host's, with the jump hosts it goes through) and when it was last used."""

    def __init__(self, conn: SshConnection, persist_s: float) -> None:
        self.conn = conn
        self.persist_s = persist_s
        self.workers = 0
        self.idle_since = time.monotonic()

    def alive(self) -> bool:
        return self.conn.is_connected


class Worker:
    """A worker on one exec channel of a held connection; its output goes to the session that has it."""

    def __init__(self, held: Held, start: str, timeout: float) -> None:
        self.held = held
        transport = held.conn.client.get_transport()
        self.chan = transport.open_session(timeout=timeout)
        self.chan.exec_command(start)
        self.chan.sendall(_PAYLOAD)
        held.workers += 1
        self.sink: Callable[[bytes], None] | None = None  # a session's send, or None while idle
        self.sink_lock = threading.Lock()
        self.ended = threading.Event()
        self.pong = threading.Event()
        self.idle_since = time.monotonic()
        self._err_done = threading.Event()
        threading.Thread(target=self._pump, args=(self.chan.recv, b"o"), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.chan.recv_stderr, b"e"), daemon=True).start()

    def _pump(self, read, tag: bytes) -> None:
        """The worker's stdout (tag o) or stderr (e) to the session that has the worker, chunk by chunk; while
        idle, stdout only carries the answer to a ping."""
        for chunk in chunks(read):
            if not self._send(tag, chunk) and tag == b"o" and b'"pong"' in chunk:
                self.pong.set()
        if tag == b"e":
            self._err_done.set()
            return
        self._err_done.wait(1)  # the worker's last words on stderr come before the end is told
        self.ended.set()
        self._send(b"x", f"the worker's stream ended (exit status {self._status()})".encode())

    def _status(self):
        return self.chan.recv_exit_status() if self.chan.exit_status_ready() else "unknown"

    def _send(self, tag: bytes, data: bytes) -> bool:
        """One frame (tag, 4-byte length, bytes) to the session; False when no session has the worker."""
        with self.sink_lock:
            if self.sink is None:
                return False
            with contextlib.suppress(OSError):
                self.sink(tag + struct.pack(">I", len(data)) + data)
            return True

    def ping(self, timeout: float) -> bool:
        """Whether the worker still answers (a kept connection may have died unseen): one small round trip."""
        self.pong.clear()
        try:
            self.chan.sendall(b'{"op": "ping", "id": "mux"}\n')
        except Exception:
            return False
        return self.pong.wait(timeout) and not self.ended.is_set()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.chan.close()
        self.held.workers -= 1
        self.held.idle_since = time.monotonic()


class Daemon:
    """The pool of held connections and idle workers, and the sessions that use them."""

    def __init__(self, folder: str, key: str) -> None:
        self.folder, self.key = folder, key
        self.path = os.path.join(folder, key + ".sock")
        self.lock = threading.Lock()
        self.held: dict[str, Held] = {}
        self.opening: dict[str, threading.Lock] = {}  # one connect at a time per host: two sessions share it
        self.idle: dict[str, list[Worker]] = {}
        self.sessions = 0
        self.last_used = time.monotonic()
        self.stopping = False

    # -- the pool ---------------------------------------------------------------------------------------------
    def _connection(self, hop_key: str, hop: Hop, persist_s: float) -> Held:
        with self.lock:
            opening = self.opening.setdefault(hop_key, threading.Lock())
        with opening:
            with self.lock:
                held = self.held.get(hop_key)
            if held is not None and held.alive():
                return held
            return self._connect(hop_key, hop, persist_s)

    def _connect(self, hop_key: str, hop: Hop, persist_s: float) -> Held:
        jumps: list = []
        try:
            conn = _open_hop(hop, _socket_for(hop, jumps, True), jumps, True)
        except BaseException:
            for jump in reversed(jumps):
                jump.close()
            raise
        conn.client.get_transport().set_keepalive(15)
        held = Held(conn, persist_s)
        with self.lock:
            old, self.held[hop_key] = self.held.get(hop_key), held
        if old is not None:  # a dead one: its workers have ended with it
            old.conn.close()
        return held

    def take(self, request: dict) -> tuple[Worker, bool]:
        """An idle worker of this pool key that still answers, else a new one (on the held connection)."""
        hop = hop_from_json(dict(request["hop"]))
        hop_key = hashlib.sha256(json.dumps(request["hop"], sort_keys=True).encode()).hexdigest()
        pool_key = hop_key + ":" + hashlib.sha256(f"{request['start']}\0{request['pool']}".encode()).hexdigest()
        while True:
            with self.lock:
                worker = self.idle.get(pool_key, []).pop() if self.idle.get(pool_key) else None
            if worker is None:
                break
            if worker.ping(min(hop.timeout, 5.0)):
                return worker, True
            worker.close()
            if not worker.ended.is_set():
                self._drop(hop_key, worker.held)  # no answer in time: the connection under it is as suspect
        persist_s = float(request.get("persist_s") or 0)
        worker = Worker(self._connection(hop_key, hop, persist_s), str(request["start"]), hop.timeout)
        worker.pool_key = pool_key  # type: ignore[attr-defined]
        return worker, False

    def _drop(self, hop_key: str, held: Held) -> None:
        """Forget a connection that failed a check: the next session connects anew (its other workers end)."""
        with self.lock:
            if self.held.get(hop_key) is held:
                del self.held[hop_key]
        held.conn.close()

    def give_back(self, worker: Worker) -> None:
        worker.idle_since = time.monotonic()
        with self.lock:
            self.idle.setdefault(worker.pool_key, []).append(worker)  # type: ignore[attr-defined]

    def expire(self) -> None:
        """Close what has been idle past its ControlPersist time; workers first, then their connections."""
        now = time.monotonic()
        with self.lock:
            for key, workers in list(self.idle.items()):
                for worker in list(workers):
                    limit = worker.held.persist_s
                    if worker.ended.is_set() or (limit and now - worker.idle_since > limit) or self.stopping:
                        workers.remove(worker)
                        worker.close()
                if not workers:
                    del self.idle[key]
            for key, held in list(self.held.items()):
                limit = held.persist_s
                idle_long = held.workers == 0 and (self.stopping or (limit and now - held.idle_since > limit))
                if idle_long or not held.alive():
                    del self.held[key]
                    held.conn.close()

    def done(self) -> bool:
        """Nothing held and no session: the daemon ends (a later run starts a new one)."""
        with self.lock:
            return self.sessions == 0 and not self.held and time.monotonic() - self.last_used > 1.0

    # -- a session --------------------------------------------------------------------------------------------
    def serve_session(self, conn: socket.socket) -> None:
        with self.lock:
            self.sessions += 1
        try:
            self._session(conn)
        finally:
            with self.lock:
                self.sessions -= 1
                self.last_used = time.monotonic()
            conn.close()

    def _session(self, conn: socket.socket) -> None:
        if not _same_user(conn):
            return
        first, pending = _first_line(conn)
        try:
            request = json.loads(first)
            if request.get("stop"):
                self.stopping = True
                conn.sendall(b'{"ok": true}\n')
                return
            worker, reused = self.take(request)
        except Exception as exc:
            conn.sendall((json.dumps(_error(exc)) + "\n").encode())
            return
        send_lock = threading.Lock()

        def send(data: bytes) -> None:
            with send_lock:
                conn.sendall(data)

        with worker.sink_lock:
            worker.sink = send
        send((json.dumps({"ok": True, "reused": reused}) + "\n").encode())
        kept = self._relay(conn, pending, worker)
        with worker.sink_lock:
            worker.sink = None
        if kept and not worker.ended.is_set() and not self.stopping:
            self.give_back(worker)
        else:
            worker.close()

    @staticmethod
    def _relay(conn: socket.socket, pending: bytes, worker: Worker) -> bool:
        """What the client writes, to the worker, until the client closes; True when the last thing it wrote was
        the keep line (sent alone, after the worker answered `release`), which the worker never sees."""
        kept = False
        data = pending
        while True:
            if data:
                kept = data.endswith(KEEP_LINE)
                if kept:
                    data = data[:-len(KEEP_LINE)]
                try:
                    if data:
                        worker.chan.sendall(data)
                except Exception:
                    return False
            data = conn.recv(65536)
            if not data:
                return kept


def _first_line(conn: socket.socket) -> tuple[bytes, bytes]:
    """The session's request line and what came after it (the worker protocol may follow at once)."""
    buf = b""
    while b"\n" not in buf and len(buf) < MAX_FIRST_LINE:
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    return line, rest


def _same_user(conn: socket.socket) -> bool:
    """Only this daemon's own user may use its connections (the folder is 0700 too)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.geteuid()


def _error(exc: Exception) -> dict:
    """A failed connect as the client re-raises it: refusals are not retried, the rest are (engine/client.py)."""
    if isinstance(exc, UserError):
        return {"error": str(exc), "kind": "user"}
    if isinstance(exc, HostUnreachable):
        return {"error": str(exc), "kind": "refused"}
    errors = getattr(exc, "errors", None)
    if isinstance(errors, dict) and errors:
        first = next(iter(errors.values()))
        return {"error": first.strerror or str(first), "kind": "transient"}
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
    return {"error": reason, "kind": "transient"}


def _bind(folder: str, key: str) -> tuple[socket.socket, int]:
    """The listening socket, under a flock so that two starting daemons never both bind; an old socket file of
    ours (a socket, in our private folder) left by a daemon that died is replaced."""
    lock_fd = os.open(os.path.join(folder, key + ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: another daemon of this key runs
    path = os.path.join(folder, key + ".sock")
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(128)
    return listener, lock_fd


def _detach() -> None:
    """Become a daemon: the starting run waits for the first fork's exit, the second one keeps serving."""
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)


def _still_ours(path: str, ino: int) -> bool:
    try:
        return os.lstat(path).st_ino == ino
    except OSError:
        return False


def serve(folder: str, key: str) -> None:
    try:
        listener, _lock_fd = _bind(folder, key)
    except BlockingIOError:
        print("running", flush=True)  # another daemon of this key: the run connects to it
        return
    ino = os.lstat(os.path.join(folder, key + ".sock")).st_ino
    _detach()
    pidfile = os.path.join(folder, key + ".pid")
    with open(pidfile, "w") as f:
        f.write(str(os.getpid()))
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    daemon = Daemon(folder, key)
    listener.settimeout(TICK_S)
    checked = 0.0
    while True:
        try:
            conn, _ = listener.accept()
            conn.settimeout(None)
            threading.Thread(target=daemon.serve_session, args=(conn,), daemon=True).start()
        except socket.timeout:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EINTR, errno.ECONNABORTED):
                break
        if time.monotonic() - checked >= TICK_S:  # not on every accept: 100 sessions come at once
            checked = time.monotonic()
            daemon.expire()
            if daemon.done() or not _still_ours(daemon.path, ino):
                break
    if _still_ours(daemon.path, ino):
        os.unlink(daemon.path)
        with contextlib.suppress(OSError):
            os.unlink(pidfile)  # under the same flock: no other daemon of this key has written it
    daemon.stopping = True
    daemon.expire()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
