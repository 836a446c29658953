"""Transports (local subprocess, SSH through Fabric) and the client side of the host worker.

Both transports start the same worker (engine/connection/worker.py) with the same fixed bootstrap command, so
tests of `local` exercise the worker code path too. Over SSH the worker talks on one exec channel of
the open connection with TCP_NODELAY set: a task costs one JSON round trip, not a new session.

Every wait for the host has a deadline. While a request is out the worker sends a beat line every few seconds;
a host from which nothing comes for `dfp_silent_s` seconds (SILENT_S by default), or that has not answered a task
with a `timeout` within it and TIMEOUT_MARGIN_S more, has gone silent (HostSilent): engine/connection/client.py takes it out
of the run, as a dropped connection. A write that the host takes no byte of for `dfp_silent_s` is the same.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import queue
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

from engine.connection.ssh_connect import open_connection
from engine.connection.ssh_options import Hop
from engine.errors import HostUnreachable
from engine.inventory.manager import Host

WORKER_SOURCE = (Path(__file__).parent / "worker.py").read_bytes()
WORKER_KEY = hashlib.sha256(WORKER_SOURCE).hexdigest()[:32]
_PAYLOAD = WORKER_KEY.encode() + b" " + base64.b64encode(zlib.compress(WORKER_SOURCE, 9)) + b"\n"
# Fixed text: no value is ever interpolated into it. The first line on stdin is the worker source's key and the
# source; the compiled worker is kept per key and python version in the user's cache (as the task modules'
# code is: engine/connection/worker.py cached_code), so a host compiles it once, not on every run (6 ms of its CPU).
BOOTSTRAP = """import sys,os,zlib,binascii,marshal
k,s=sys.stdin.buffer.readline().split()
d=os.path.join(os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'),'.cache'),'dflash-provision','code')
k.isalnum() or sys.exit('dfp-worker: the first line is not a worker key and source')
p=os.path.join(d,'worker-%s-%x.bin'%(k.decode(),sys.hexversion))
try:
 with open(p,'rb') as f:c=marshal.loads(f.read())
except Exception:
 c=compile(zlib.decompress(binascii.a2b_base64(s)),'dfp-worker','exec')
 try:
  os.makedirs(d,exist_ok=True);t='%s.tmp-%d'%(p,os.getpid())
  with open(t,'wb') as f:f.write(marshal.dumps(c))
  os.rename(t,p)
 except OSError:pass
del k,s,d,p
exec(c)"""


# A second worker started through sudo (engine/connection/become.py) writes this line first, from python, once sudo has
# let it run: until it arrives, what the channel shows on stderr is sudo's (its prompt, its refusals).
READY_LINE = b"dfp-worker-ready"
BECOME_BOOTSTRAP = f"import sys;sys.stdout.write('{READY_LINE.decode()}\\n');sys.stdout.flush();" + BOOTSTRAP


SILENT_S = 60.0  # dfp_silent_s's default: seconds without a word from a host while a request is out
BEAT_MAX_S = 5.0  # the worker's beat interval: a quarter of the silence limit, at most this
TIMEOUT_MARGIN_S = 10.0  # past a task's `timeout`: the worker stops the task at its timeout and answers at once


def silent_limit(host: Host) -> float:
    """The host's silence limit (`dfp_silent_s`): seconds without a line from its worker (a beat, progress, the
    answer) while a request is out, after which the host has gone silent."""
    value = host.vars.get("dfp_silent_s", SILENT_S)
    try:
        limit = float(value)
    except (TypeError, ValueError):
        limit = 0.0
    if not limit > 0 or isinstance(value, bool):
        raise HostUnreachable(f"dfp_silent_s of host {host.name} must be a number of seconds above 0, not {value!r}")
    return limit


def chunks(read: Callable[[int], bytes]) -> Iterator[bytes]:
    """What a stream gives until it ends (or breaks: a closed channel or pipe reads as the end). A read timeout,
    which another thread may have set on a shared channel (Transport._recv), is not an end."""
    while True:
        try:
            chunk = read(65536)
        except TimeoutError:
            continue
        except Exception:
            return
        if not chunk:
            return
        yield chunk


class WorkerDied(Exception):
    """The worker's stream ended: the process died or the connection dropped."""


class HostSilent(WorkerDied):
    """Nothing came from the host within the silence limit, or no answer within a task's timeout and its margin."""


class DaemonSilent(OSError):
    """The kept-connection daemon did not answer in time (engine/connection/persist.py): the run connects directly instead."""


class Wait:
    """How long a read may wait for the host's next bytes: the silence limit from the last bytes that came, never
    past a task's timeout and its margin from the request (TimeoutError once either is spent)."""

    def __init__(self, silent_s: float, timeout_s: float | None = None) -> None:
        self.silent_s, self.timeout_s = silent_s, timeout_s
        self.until = time.monotonic() + float(timeout_s) + TIMEOUT_MARGIN_S if timeout_s else None
        self.by_timeout = False  # whether the task's timeout, not the silence limit, bounds the current wait

    def __call__(self) -> float:
        to_timeout = float("inf") if self.until is None else self.until - time.monotonic()
        self.by_timeout = to_timeout < self.silent_s
        left = min(self.silent_s, to_timeout)
        if left <= 0:
            raise TimeoutError
        return left

    def why(self) -> str:
        if self.by_timeout:
            return (f"no answer within the task's timeout of {self.timeout_s:g} s and {TIMEOUT_MARGIN_S:g} s more "
                    "(a worker stops a task at its timeout and answers at once)")
        return (f"nothing came from it for {self.silent_s:g} s (dfp_silent_s; a working host sends a line every "
                f"{beat_interval(self.silent_s):g} s while a request runs)")


def beat_interval(silent_s: float) -> float:
    """How often the worker says it is there while a request runs: four beats fit in the silence limit."""
    return min(BEAT_MAX_S, silent_s / 4)


def ready(fd: int, events: int, wait_s: float) -> bool:
    """Whether `fd` is ready for `events` (POLLIN, POLLOUT) within wait_s seconds (poll: any descriptor number)."""
    poller = select.poll()
    poller.register(fd, events)
    return bool(poller.poll(wait_s * 1000))


class _Stream:
    """Line reader over a byte source whose reads wait at most a given time (TimeoutError past it)."""

    def __init__(self, read: Callable[[int, float], bytes]) -> None:
        self._read = read
        self._buf = b""

    def readline(self, wait: Wait) -> bytes:
        while b"\n" not in self._buf:
            chunk = self._read(65536, wait())
            if not chunk:
                raise WorkerDied("worker stream closed")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line


class Transport:
    """Starts the worker and moves files; subclasses know how to reach the host."""

    name = "base"

    def __init__(self, host: Host) -> None:
        self.host = host
        self.stderr_tail: deque[str] = deque(maxlen=200)
        self._next_id = 0
        self._lock = threading.Lock()
        self.silent_s = silent_limit(host)
        self.beat_s = beat_interval(self.silent_s)  # sent to the worker in hello
        self.notes: list[str] = []  # what the run should say about this connection (a daemon bypassed)

    # subclass API
    def open(self) -> None: ...
    def _write(self, data: bytes) -> None: ...  # gives up (TimeoutError) when no byte is taken for silent_s
    def _readline(self, wait: Wait) -> bytes:
        raise NotImplementedError
    def close(self) -> None: ...
    def put(self, local: str, remote: str) -> None: ...
    def keep(self) -> None: ...  # a persistent transport: leave the released worker for the next run
    def forget(self) -> None: ...  # a persistent transport: the kept connection is dropped, the next one logs in

    def route_note(self) -> str:
        """Where the host's words pass besides the connection (a kept-connection daemon), for a silence message."""
        return ""

    persistent = False  # True: the worker is kept for the next run when this one ends (engine/connection/persist.py)
    discovered: str | None = None  # the interpreter the worker reported (hello's executable), once it started

    def python(self) -> str:
        """The host's python: ansible_python_interpreter as given, else (unset or `auto`) the one found there."""
        given = self.host.vars.get("ansible_python_interpreter")
        if given is not None and str(given) not in AUTO_INTERPRETER:
            return str(given)
        return self.discovered or (discover_local() if self.name == "local" else "python3")

    def start_command(self) -> str:
        """The shell command that starts the worker over ssh: the python given, or the first candidate found."""
        boot = shlex.quote(BOOTSTRAP)
        given = self.host.vars.get("ansible_python_interpreter")
        if given is not None and str(given) not in AUTO_INTERPRETER:
            return f"{shlex.quote(str(given))} -u -c {boot}"
        names = " ".join(shlex.quote(c) for c in PYTHON_CANDIDATES)
        return (f'for p in {names}; do if command -v "$p" >/dev/null 2>&1; then exec "$p" -u -c {boot}; fi; done; '
                f"echo 'no python3 found (looked for {' '.join(PYTHON_CANDIDATES)}); set ansible_python_interpreter' >&2; "
                "exit 127")

    def _drain(self, read: Callable[[int], bytes]) -> None:
        pending = b""
        for chunk in chunks(read):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self.stderr_tail.append(line.decode("utf-8", "replace"))

    def request(self, payload: dict, progress: Callable[[str], None] | None = None,
                timeout_s: float | None = None) -> dict:
        """Send one request and return its answer; HostSilent when the host goes silent (nothing for silent_s, or
        no answer within `timeout_s`, a task's timeout, and its margin), WorkerDied when its stream ends."""
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            wait = Wait(self.silent_s, timeout_s)
            try:
                self._write((json.dumps(dict(payload, id=rid), default=str) + "\n").encode())
                return self._answer(rid, wait, progress)
            except TimeoutError:
                raise HostSilent(wait.why() + self.route_note()) from None
            except (OSError, EOFError, WorkerDied) as exc:
                tail = "\n".join(list(self.stderr_tail)[-15:])
                raise WorkerDied(f"{type(exc).__name__}: {exc}" + (f"\n{tail}" if tail else "")) from None

    def _answer(self, rid: int, wait: Wait, progress: Callable[[str], None] | None) -> dict:
        """The answer to request `rid`; its progress lines go to `progress`, its beats only restart the wait."""
        while True:
            line = self._readline(wait)
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                self.stderr_tail.append(line.decode("utf-8", "replace"))
                continue
            if msg.get("id") != rid or "beat" in msg:
                continue
            if "progress" in msg:
                if progress:
                    progress(msg["progress"])
                continue
            return msg


# Interpreter discovery, as Ansible's `auto` (unset ansible_python_interpreter means auto): the system's python3
# first, then the usual places and names; the worker needs 3.9 or newer.
AUTO_INTERPRETER = ("auto", "auto_silent", "auto_legacy", "auto_legacy_silent")
PYTHON_CANDIDATES = ("/usr/bin/python3", "/usr/libexec/platform-python", "python3", "/usr/local/bin/python3",
                     "python3.13", "python3.12", "python3.11", "python3.10", "python3.9")


def discover_local() -> str:
    """`auto` on this machine (a host with ansible_connection: local): the first candidate found, as on a remote
    host, so a worker started through sudo as another user runs a python that user can read; this process's own
    python when none is found."""
    for name in PYTHON_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return sys.executable


class LocalTransport(Transport):
    name = "local"

    def open(self) -> None:
        env = dict(os.environ)
        env.pop("PYTHONSTARTUP", None)
        self.proc = subprocess.Popen(
            [self.python(), "-u", "-c", BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr  # noqa: S101 - all three are PIPE
        threading.Thread(target=self._drain, args=(self.proc.stderr.read1,), daemon=True).start()  # type: ignore[attr-defined]
        os.set_blocking(self.proc.stdin.fileno(), False)  # written with a deadline (_write), never through its buffer
        self._stream = _Stream(self._read)
        self._write(_PAYLOAD)

    def _read(self, size: int, wait_s: float) -> bytes:
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]  # opened as PIPE
        if not ready(fd, select.POLLIN, wait_s):
            raise TimeoutError
        return os.read(fd, size)

    def _write(self, data: bytes) -> None:
        fd, view = self.proc.stdin.fileno(), memoryview(data)  # type: ignore[union-attr]  # opened as PIPE
        while view:
            if not ready(fd, select.POLLOUT, self.silent_s):
                raise TimeoutError
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue

    def _readline(self, wait: Wait) -> bytes:
        return self._stream.readline(wait)

    def put(self, local: str, remote: str) -> None:
        remote = os.path.expanduser(remote)
        os.makedirs(os.path.dirname(remote), exist_ok=True)
        shutil.copyfile(local, remote)

    def close(self) -> None:
        """End the worker by closing its stdin. It is continued first: one given up as silent because it was
        stopped (SIGSTOP) then sees the end and stops its task's processes before it exits (engine/connection/worker.py)."""
        proc = getattr(self, "proc", None)
        if proc and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGCONT)
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()


class SSHTransport(Transport):
    name = "ssh"

    def __init__(self, host: Host, hop: Hop | None = None) -> None:
        super().__init__(host)
        self.hop = hop  # the route, when connect() resolved it already

    def open(self) -> None:
        conn = open_connection(self.host, self.hop)
        self.conn = conn
        transport = conn.client.get_transport()
        transport.set_keepalive(15)
        self.chan = transport.open_session()
        self.chan.exec_command(self.start_command())
        threading.Thread(target=self._drain, args=(self.chan.recv_stderr,), daemon=True).start()
        self._stream = _Stream(self._recv)
        self._write(_PAYLOAD)

    def _recv(self, size: int, wait_s: float) -> bytes:
        self.chan.settimeout(wait_s)  # socket.timeout (a TimeoutError) past it
        return self.chan.recv(size)

    def _write(self, data: bytes) -> None:
        self.chan.settimeout(self.silent_s)
        self.chan.sendall(data)

    def _readline(self, wait: Wait) -> bytes:
        return self._stream.readline(wait)

    def put(self, local: str, remote: str) -> None:
        sftp_put(self.conn, local, remote)

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                if not self.chan.closed:
                    self.chan.shutdown_write()
                    self.chan.status_event.wait(2)  # set by paramiko when the exit status arrives
            except Exception:  # noqa: S110 - the channel is already broken; the connection is closed next
                pass
            conn.close()


class SpawnedTransport(Transport):
    """Another worker process on the same host, started with `argv` (sudo ... python3 -c BECOME_BOOTSTRAP) on a
    new exec channel of the parent's SSH connection (or as a local subprocess): no new connection, no new login.

    Until the READY_LINE arrives the caller (engine/connection/become.py) watches stderr (`stderr_text`) and may write to
    stdin (a password at sudo's prompt); `send_worker()` then sends the worker's source, as Transport.open does.
    """

    def __init__(self, parent: Transport, argv: list[str]) -> None:
        super().__init__(parent.host)
        self.name = parent.name
        self.parent = parent
        self.argv = argv
        self.ready = threading.Event()  # READY_LINE seen on stdout
        self.ended = threading.Event()  # stdout and stderr closed: the process (sudo or the worker) is gone
        self._open_streams = 2
        self._ends = threading.Lock()
        self.activity = threading.Event()  # set on any output; the caller waits on it
        self._chunks: queue.Queue[bytes] = queue.Queue()
        self._err = bytearray()

    def python(self) -> str:
        return self.parent.python()

    def open(self) -> None:
        if self.name == "ssh":
            self.chan = self.parent.conn.client.get_transport().open_session()  # type: ignore[attr-defined]
            self.chan.exec_command(" ".join(shlex.quote(a) for a in self.argv))
            self.chan.settimeout(self.silent_s)  # for its writes; the readers (chunks) read on past a timeout
            read_out, read_err, self._send = self.chan.recv, self.chan.recv_stderr, self.chan.sendall
        else:
            env = dict(os.environ)
            env.pop("PYTHONSTARTUP", None)
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env)
            assert self.proc.stdin and self.proc.stdout and self.proc.stderr  # noqa: S101 - all three are PIPE
            read_out, read_err = self.proc.stdout.read1, self.proc.stderr.read1  # type: ignore[attr-defined]
            self._send = self._send_local
        threading.Thread(target=self._pump_out, args=(read_out,), daemon=True).start()
        threading.Thread(target=self._pump_err, args=(read_err,), daemon=True).start()
        self._stream = _Stream(self._next_chunk)

    def _send_local(self, data: bytes) -> None:
        self.proc.stdin.write(data)  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def _pump_out(self, read: Callable[[int], bytes]) -> None:
        """stdout into the queue once the READY_LINE has come; lines before it are noise kept for messages."""
        head = b""
        for chunk in chunks(read):
            if not self.ready.is_set():
                head += chunk
                chunk = b""
                while b"\n" in head and not self.ready.is_set():
                    first, _, head = head.partition(b"\n")
                    if first.strip() == READY_LINE:
                        self.ready.set()
                        chunk, head = head, b""
                    else:
                        self._err += first + b"\n"
            if chunk:
                self._chunks.put(chunk)
            self.activity.set()
        self._chunks.put(b"")
        self._stream_ended()

    def _pump_err(self, read: Callable[[int], bytes]) -> None:
        """stderr kept whole until the worker is ready (sudo's prompt has no newline), then as a tail of lines."""
        for chunk in chunks(read):
            if self.ready.is_set():
                self.stderr_tail.extend(chunk.decode("utf-8", "replace").splitlines())
            else:
                self._err += chunk
            self.activity.set()
        self._stream_ended()

    def _stream_ended(self) -> None:
        """`ended` once both streams have: what sudo said on stderr is all read before its end is judged."""
        with self._ends:
            self._open_streams -= 1
            if self._open_streams == 0:
                self.ended.set()
        self.activity.set()

    def stderr_text(self) -> str:
        """What the channel printed on stderr before the worker was ready (sudo's prompts and messages)."""
        return bytes(self._err).decode("utf-8", "replace")

    def _next_chunk(self, _size: int, wait_s: float) -> bytes:
        try:
            return self._chunks.get(timeout=wait_s)
        except queue.Empty:
            raise TimeoutError from None

    def send_worker(self) -> None:
        self._write(_PAYLOAD)

    def _write(self, data: bytes) -> None:
        self._send(data)

    def _readline(self, wait: Wait) -> bytes:
        return self._stream.readline(wait)

    def put(self, local: str, remote: str) -> None:
        raise NotImplementedError("files reach a become worker through its protocol (engine/connection/client.py)")

    def close(self) -> None:
        """End this worker's channel (or process) only; the parent's connection stays open."""
        chan = getattr(self, "chan", None)
        if chan is not None:
            try:
                if not chan.closed:
                    chan.shutdown_write()
                    chan.status_event.wait(2)
            except Exception:  # noqa: S110 - the channel is already broken
                pass
            chan.close()
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()


def sftp_put(conn, local: str, remote: str) -> None:
    """A file onto the host as the login user over the connection's SFTP (which starts in the user's home)."""
    conn.sftp().put(local, remote[2:] if remote.startswith("~/") else remote)
