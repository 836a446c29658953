"""The holder of kept connections (ControlPersist): one process per control-node user and code version that keeps
each host's SSH connection and an idle worker on it between runs, so a later run costs the host neither a login
nor a python start.

Started by engine/connection/persist.py on the first run that asks for it (`-o ControlMaster=auto -o ControlPersist=60s`);
it listens on a unix socket in a 0700 folder of the user's and answers only its own user (SO_PEERCRED). One
socket connection is one session with one host's worker:

  client -> {"hop": HOP, "start": CMD, "pool": KEY, "persist_s": S}   (one line; HOP as engine/connection/persist.py sends it)
  daemon -> {"accepted": true, "pid": PID}   (at once: the run bypasses a daemon that does not say this in time)
  daemon -> {"ok": true, "reused": bool} | {"error": MSG, "kind": "refused" | "user" | "transient"}
  (or a session of one line: {"stop": true}, `invoke disconnect`; {"reset": HOP}, `meta: reset_connection`)
  then the worker's protocol, relayed: what the client writes goes to the worker's stdin as it is; what the
  worker writes comes back in frames (engine/connection/persist_worker.py: b"o" its stdout, b"e" its stderr, b"x" the
  reason its stream ended), one thread per session polling both sides.

A session hands its worker back for a later one only when it ends with the worker's `release` answered and then
{"mux": "keep"}; any other end (the client died, the connection broke, a request still out) closes the worker's
channel, so the worker exits and the kernel drops the host lock, as when a run's own connection closes.
A request is never sent twice: what the client writes goes to the worker once, or the session ends.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import resource
import select
import socket
import sys
import threading
import time

from engine.connection.persist_worker import PENDING_MAX, POLL_S, Held, Worker, frame, hop_from_json, readable, split_frames
from engine.connection.ssh_connect import failure_reason, open_route
from engine.connection.ssh_options import Hop
from engine.connection.user_socket import answers, listen_private, peer_uid, sweep_other_keys, try_key_lock
from engine.errors import HostUnreachable, UserError

KEEP_LINE = b'{"mux": "keep"}\n'
MAX_FIRST_LINE = 1 << 20
FIRST_LINE_TIMEOUT_S = 30.0
TICK_S = 0.5
LOCK_WAIT_S = 5.0  # how long a starting daemon waits for an ending one to let go of the key
# paramiko's transport thread wakes at each timeout of its socket (0.1 s) to check for its end and keepalives:
# 100 held connections cost the idle daemon about 40 ms of CPU a second. Data still wakes it at once.
IDLE_POLL_S = 2.0
_ACCEPT_AGAIN = (errno.EINTR, errno.ECONNABORTED, errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.EPROTO)


class Daemon:
    """The pool of held connections and idle workers, and the sessions that use them."""

    def __init__(self, folder: str, key: str, ino: int) -> None:
        self.folder, self.key = folder, key
        self.path = os.path.join(folder, key + ".sock")
        self.pidfile = os.path.join(folder, key + ".pid")
        self.ino = ino  # of the socket file this daemon bound: what it may remove
        self.lock = threading.Lock()
        self.held: dict[str, Held] = {}
        self.opening: dict[str, threading.Lock] = {}  # one connect at a time per host: two sessions share it
        self.idle: dict[str, list[Worker]] = {}
        self.sessions = 0
        self.last_used = time.monotonic()
        self.stopping = False

    # -- the pool ---------------------------------------------------------------------------------------------
    def _reserved_connection(self, hop_key: str, hop: Hop, persist_s: float) -> Held:
        """The host's held connection (connected first if there is none, or it died), reserved for one worker."""
        with self.lock:
            opening = self.opening.setdefault(hop_key, threading.Lock())
        with opening:
            with self.lock:
                held = self.held.get(hop_key)
                if held is not None and held.alive():
                    held.workers += 1
                    return held
            return self._connect(hop_key, hop, persist_s)

    def _connect(self, hop_key: str, hop: Hop, persist_s: float) -> Held:
        conn = open_route(hop)
        transport = conn.client.get_transport()
        transport.set_keepalive(15)
        if isinstance(transport.sock, socket.socket):
            transport.sock.settimeout(IDLE_POLL_S)
        held = Held(conn, persist_s, self.lock)
        held.workers = 1
        with self.lock:
            old, self.held[hop_key] = self.held.get(hop_key), held
        if old is not None:
            self._retire(old)
        return held

    def _retire(self, held: Held) -> None:
        """Out of the pool; closed now if no worker uses it, else with its last worker."""
        with self.lock:
            held.retired = True
            closing = held.workers == 0
        if closing:
            held.conn.close()

    def take(self, request: dict) -> tuple[Worker, bool]:
        """An idle worker of this pool key that still answers, else a new one (on the held connection)."""
        hop_key = _hop_key(request["hop"])
        hop = hop_from_json(json.loads(json.dumps(request["hop"])))  # a copy: it is taken apart
        pool_key = hop_key + ":" + hashlib.sha256(f"{request['start']}\0{request['pool']}".encode()).hexdigest()
        while True:
            with self.lock:
                worker = self.idle.get(pool_key, []).pop() if self.idle.get(pool_key) and not self.stopping else None
                if worker is not None:
                    worker.taken = True
            if worker is None:
                break
            with worker.reading:
                pass  # the daemon's tick may be reading its idle output: from now on only this session reads it
            try:
                answers = worker.ping(min(hop.timeout, 5.0))
            except Exception:
                answers = False
            if answers:
                return worker, True
            worker.close(worker.idle_since)
            if not worker.ended:  # no answer in time: new sessions get a new connection
                self._forget(hop_key, worker.held)
        held = self._reserved_connection(hop_key, hop, float(request.get("persist_s") or 0))
        try:
            return self._start_worker(held, str(request["start"]), hop.timeout, pool_key), False
        except BaseException:
            held.free(time.monotonic())
            self._forget(hop_key, held)  # a connection that cannot start a worker is not handed out again
            raise

    @staticmethod
    def _start_worker(held: Held, start: str, timeout: float, pool_key: str) -> Worker:
        """A new worker, or an error within about `timeout`: paramiko waits for the exec's answer with no limit of
        its own, so a connection dead but not yet noticed is closed when the start takes longer."""
        watchdog = threading.Timer(timeout + 5.0, held.conn.close)
        watchdog.daemon = True
        watchdog.start()
        try:
            return Worker(held, start, timeout, pool_key)
        finally:
            watchdog.cancel()

    def _forget(self, hop_key: str, held: Held) -> None:
        """Out of the pool if it is still the host's connection there (retired: closed with its last worker)."""
        with self.lock:
            current = self.held.get(hop_key) is held
            if current:
                del self.held[hop_key]
        if current:
            self._retire(held)

    def give_back(self, worker: Worker) -> None:
        worker.idle_since = time.monotonic()
        with self.lock:
            worker.taken = False
            self.idle.setdefault(worker.pool_key, []).append(worker)

    def expire(self) -> None:
        """Close what has been idle past its ControlPersist time; workers first, then their connections. An idle
        worker's output is read outside the lock (a read can wait on paramiko), and a worker that fails it ends."""
        with self.lock:
            idle = [w for ws in self.idle.values() for w in ws]
        said = set(readable([w.fd for w in idle], 0))
        for worker in [w for w in idle if w.fd in said]:
            if not worker.reading.acquire(blocking=False):
                continue
            try:
                if not worker.taken:  # a session that took it meanwhile reads it itself
                    worker.keep_idle_output()  # nothing of a kept worker's output backs up onto the host
            except Exception:
                worker.ended = True
            finally:
                worker.reading.release()
        now = time.monotonic()
        ending: list[Worker] = []
        closing: list[Held] = []
        with self.lock:
            for key, workers in list(self.idle.items()):
                for worker in list(workers):
                    limit = worker.held.persist_s
                    if worker.ended or (limit and now - worker.idle_since > limit) or self.stopping:
                        workers.remove(worker)
                        ending.append(worker)
                if not workers:
                    del self.idle[key]
        for worker in ending:
            worker.close(worker.idle_since)
        with self.lock:
            for key, held in list(self.held.items()):
                limit = held.persist_s
                idle_long = held.workers == 0 and (self.stopping or (limit and now - held.idle_since > limit))
                if idle_long or not held.alive():
                    del self.held[key]
                    closing.append(held)
        for held in closing:
            self._retire(held)

    def reset(self, hop: dict) -> None:
        """`meta: reset_connection`: the host's connection leaves the pool (closed once its last worker ends) and
        its idle workers close, so the next session logs in anew: the login's groups and environment as they are
        now. Sessions in flight finish on theirs."""
        hop_key = _hop_key(hop)
        with self.lock:
            keys = [k for k in self.idle if k.startswith(hop_key + ":")]  # pool keys are hop_key:worker
            idle = [w for key in keys for w in self.idle.pop(key)]
            held = self.held.get(hop_key)
        for worker in idle:
            worker.close(worker.idle_since)
        if held is not None:
            self._forget(hop_key, held)

    def stop(self) -> None:
        """`invoke disconnect`: no new session from now on (the socket goes: a run starts a new daemon), idle
        workers and connections close now, the sessions in flight finish on theirs."""
        self.stopping = True
        self.unlisten()
        self.expire()

    def unlisten(self) -> None:
        """Remove the socket (and pidfile) if they are still this daemon's own."""
        if _still_ours(self.path, self.ino):
            os.unlink(self.path)
            with contextlib.suppress(OSError):
                os.unlink(self.pidfile)  # under the same flock: no other daemon of this key has written it

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
        except OSError:
            pass  # the client went away before its session began
        finally:
            with self.lock:
                self.sessions -= 1
                self.last_used = time.monotonic()
            conn.close()

    def _control(self, request: dict) -> bool:
        """A session of one line to the daemon itself: stop (`invoke disconnect`) or reset one host's connection."""
        if request.get("stop"):
            self.stop()
        elif request.get("reset"):
            self.reset(request["reset"])
        else:
            return False
        return True

    def _session(self, conn: socket.socket) -> None:
        if peer_uid(conn) != os.geteuid():  # only this daemon's own user may use its connections
            return
        conn.settimeout(FIRST_LINE_TIMEOUT_S)
        first, pending = _first_line(conn)
        conn.settimeout(None)
        try:
            request = json.loads(first)
            if self._control(request):
                conn.sendall(b'{"ok": true}\n')
                return
            conn.sendall((json.dumps({"accepted": True, "pid": os.getpid()}) + "\n").encode())
            worker, reused = self.take(request)
        except Exception as exc:
            conn.sendall((json.dumps(_error(exc)) + "\n").encode())
            return
        kept = False
        try:
            kept = _relay(conn, pending, worker, (json.dumps({"ok": True, "reused": reused}) + "\n").encode())
        except Exception:  # noqa: S110 - the client reset or left: the worker is not kept (below)
            pass
        finally:
            if kept and not worker.ended and not self.stopping:
                self.give_back(worker)
            else:
                worker.close()


def _hop_key(hop: dict) -> str:
    """The pool's name for a route (the host with its jump hosts and options), as the client sends it."""
    return hashlib.sha256(json.dumps(hop, sort_keys=True).encode()).hexdigest()


def _relay(conn: socket.socket, pending: bytes, worker: Worker, answer: bytes) -> bool:
    """One session: the client's bytes to the worker as they come, the worker's output to the client as frames,
    in one thread (poll on both); True when the client's last line was the keep line (sent alone, after the
    worker answered `release`), which the worker never sees. The client's socket is never waited on for
    writing longer than it takes: past PENDING_MAX bytes unread, the worker's stderr is dropped (the run keeps
    only its tail), never its stdout."""
    conn.setblocking(False)
    out = bytearray(answer) + worker.pending
    worker.pending = bytearray()
    kept = False
    data = pending
    while True:
        if data:
            kept = data.endswith(KEEP_LINE)
            if kept:
                data = data[:-len(KEEP_LINE)]
            if data:
                try:
                    worker.chan.sendall(data)
                except OSError:
                    pass  # the worker already ended (a start that failed at once): its words and end follow below
            data = b""
        if out:
            try:
                del out[:conn.send(out)]
            except BlockingIOError:
                pass
            except (BrokenPipeError, ConnectionResetError):
                return kept  # gone: kept only if its last line asked for it
        poller = select.poll()  # not select(): a daemon of many hosts has descriptors past FD_SETSIZE
        poller.register(conn, select.POLLIN | (select.POLLOUT if out else 0))
        if not worker.ended:
            poller.register(worker.fd, select.POLLIN)
        # With a timeout, and the channel read on every wake: paramiko's stdout and stderr buffers share one pipe,
        # and a feed that lands while the other buffer is being drained can leave it unset with data waiting.
        events = dict(poller.poll(POLL_S * 1000))
        if events.get(conn.fileno(), 0) & (select.POLLIN | select.POLLHUP | select.POLLERR):
            try:
                data = conn.recv(65536)
            except BlockingIOError:
                data = None  # type: ignore[assignment]
            except ConnectionResetError:  # it left with frames unread (stray stderr): as it ended
                return kept
            if data == b"":
                return kept
            data = data or b""
        if not worker.ended:
            for tag, chunk in split_frames(worker.frames()):
                if tag != b"e" or len(out) < PENDING_MAX:
                    out += frame(tag, chunk)


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


def _error(exc: Exception) -> dict:
    """A failed connect as the client re-raises it: refusals are not retried, the rest are (engine/connection/client.py)."""
    if isinstance(exc, UserError):
        return {"error": str(exc), "kind": "user"}
    if isinstance(exc, HostUnreachable):
        return {"error": str(exc), "kind": "refused"}
    return {"error": failure_reason(exc), "kind": "transient"}


def _bind(folder: str, key: str) -> tuple[socket.socket, int]:
    """The listening socket, under a flock so that two starting daemons never both bind; an old socket file of
    ours (a socket, in our private folder) left by a daemon that died is replaced."""
    path = os.path.join(folder, key + ".sock")
    lock_fd = _take_lock(os.path.join(folder, key + ".lock"), path)
    return listen_private(path, 128), lock_fd


def _take_lock(lock_path: str, path: str) -> int:
    """The key's flock (its descriptor). Held by a daemon that serves: BlockingIOError (the run connects to that
    one); held by one that is ending (it has stopped listening and lets go once its last session ends): waited for,
    up to LOCK_WAIT_S."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        lock_fd = try_key_lock(lock_path)
        if lock_fd is not None:
            return lock_fd
        if answers(path) or time.monotonic() > deadline:
            raise BlockingIOError(errno.EWOULDBLOCK, f"{lock_path} is held by a daemon that serves")
        time.sleep(0.05)


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
        listener, lock_fd = _bind(folder, key)
    except BlockingIOError:
        print("running", flush=True)  # another daemon of this key: the run connects to it
        return
    ino = os.lstat(os.path.join(folder, key + ".sock")).st_ino
    _detach()
    with open(os.path.join(folder, key + ".pid"), "w") as f:
        f.write(str(os.getpid()))
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    with contextlib.suppress(OSError):
        sweep_other_keys(folder, "", key, (".pid",))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):  # four descriptors a host (TCP, unix socket, the channel's pipe)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))
    daemon = Daemon(folder, key, ino)
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
            if exc.errno not in _ACCEPT_AGAIN:
                break
            time.sleep(0.05)  # out of descriptors or memory for a moment: the sessions already open go on
        if time.monotonic() - checked >= TICK_S:  # not on every accept: 100 sessions come at once
            checked = time.monotonic()
            with contextlib.suppress(Exception):  # a tick's failure must not end the sessions in flight
                daemon.expire()
            if daemon.stopping or daemon.done() or not _still_ours(daemon.path, daemon.ino):
                break
    # Stop listening first, then let go of the key: a run from now on starts a new daemon at once, while the
    # sessions in flight here finish.
    daemon.unlisten()
    listener.close()
    os.close(lock_fd)
    daemon.stopping = True
    while daemon.sessions:
        time.sleep(0.1)
    daemon.expire()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
