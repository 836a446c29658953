"""Kept connections on the run's side (ControlPersist): the transport that talks to a host's worker through the
daemon (engine/connection/persist_daemon.py), and finding or starting that daemon.

A host kept by its ssh options (`-o ControlMaster=auto -o ControlPersist=60s`, which is also the default where
they say neither: engine/connection/ssh_options.py DEFAULT_KEEP) is reached through the daemon: the first run connects
there and leaves the connection and an idle worker behind; the runs within the next 60 s idle use them, with no
login and no python start on the host. Files to the login user and workers started through sudo go over a
connection of the run's own, opened only when needed.

Every socket operation with the daemon has a deadline. A live daemon acknowledges a session's first line at once
(`{"accepted": true, "pid"}`); one that does not within DAEMON_ANSWER_S (stopped, hung) is bypassed: the host is
reached by a connection of the run's own (engine/connection/transport.py connect), the daemon named among the connection's
notes, and the rest of the run does not ask it again. A session whose daemon stops relaying mid-run meets the
host's silence limit (engine/connection/transport.py Wait), the daemon named in the message. `invoke disconnect` waits for each
daemon's answer as long, and names those that gave none.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from engine.connection import runtime
from engine.connection.ssh_options import Hop, ProxyCommandSpec
from engine.connection.transport import WORKER_KEY, DaemonSilent, Transport, Wait, WorkerDied, sftp_put
from engine.connection.user_socket import check_private, peer_uid, socket_folder
from engine.errors import HostUnreachable, UserError
from engine.inventory.manager import Host

ENGINE = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 15.0
DAEMON_ANSWER_S = 10.0  # a live daemon answers a line at once (milliseconds); past this it is taken as stopped
SUN_PATH_MAX = 107
_start_lock = threading.Lock()  # the hosts of one run connect in parallel: one of them starts the daemon


def folder() -> Path:
    """Where the daemon's socket lives (user_socket.socket_folder), unchecked: for finding what is there."""
    return Path(socket_folder())


def private_folder() -> Path:
    """The socket's folder, made 0700 if new; refused when it is not this user's own private folder (another
    user who could reach the socket would use this user's connections). Checked once per path and run: every
    host's session asks (and each connection checks who answers: _connect_socket)."""
    path = folder()
    if path not in _CHECKED:
        check_private(str(path), "the kept-connection socket, ControlPersist", "remove ControlPersist from the ssh options")
        _CHECKED.add(path)
    return path


_CHECKED: set[Path] = set()


@functools.cache  # the files of this process's own engine: read once per run
def code_key() -> str:
    """The daemon's version: this python, this control node (a home shared by NFS holds one folder for several
    machines), the ssh agent it will log in with (the daemon keeps its starter's SSH_AUTH_SOCK: a run with another
    agent, e.g. from another login, gets a daemon of its own) and every engine file (the daemon imports many of
    them): a changed one never meets an old daemon."""
    agent = os.environ.get("SSH_AUTH_SOCK", "")
    digest = hashlib.sha256(f"{sys.version}\0{socket.gethostname()}\0{agent}\0{WORKER_KEY}".encode())
    for path in sorted(p for p in ENGINE.rglob("*.py") if p.is_file()):  # not an editor's dangling .#x.py link
        digest.update(path.relative_to(ENGINE).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def socket_path() -> Path:
    """This code version's socket; a UserError when the path is too long for a unix socket."""
    path = private_folder() / f"{code_key()}.sock"
    if len(str(path)) > SUN_PATH_MAX:
        raise UserError(f"the kept-connection socket path {path} is longer than a unix socket allows "
                        f"({SUN_PATH_MAX} bytes); set XDG_RUNTIME_DIR to a shorter folder of yours, or remove "
                        "ControlPersist from the ssh options; nothing was sent to any host.")
    return path


def hop_to_json(hop: Hop) -> dict:
    """The route as the daemon needs it: files as absolute paths and a ProxyCommand with this run's folder (the
    daemon's own working folder is another)."""
    data = dataclasses.asdict(hop)
    for key in ("identity_files", "explicit_keys", "known_hosts"):
        data[key] = [os.path.abspath(p) for p in data[key]]
    if isinstance(hop.via, ProxyCommandSpec):
        data["via"]["cwd"] = os.getcwd()
    elif isinstance(hop.via, Hop):
        data["via"] = hop_to_json(hop.via)
    return data


def daemon_label(path: Path) -> str:
    """The daemon behind a socket as a message names it: its pid (from the pidfile beside the socket) and socket."""
    try:
        pid = path.with_suffix(".pid").read_text().strip() or "unknown"
    except OSError:
        pid = "unknown"
    return f"the kept-connection daemon (pid {pid}, socket {path})"


def _silent(path: Path) -> DaemonSilent:
    """The error of a daemon that did not answer in time; this process does not ask it again for SILENT_MEMORY_S."""
    _SILENT[path] = time.monotonic()
    return DaemonSilent(errno.ETIMEDOUT, f"{daemon_label(path)} did not answer within {DAEMON_ANSWER_S:g} s "
                                         "(stopped or hung; `invoke disconnect` cannot end it either: kill that pid)")


def _known_silent(path: Path) -> bool:
    return time.monotonic() - _SILENT.get(path, -SILENT_MEMORY_S) < SILENT_MEMORY_S


_SILENT: dict[Path, float] = {}  # socket -> when its daemon last failed to answer
SILENT_MEMORY_S = 300.0  # how long a process bypasses a daemon that did not answer without asking it again


def _connect_socket(path: Path) -> socket.socket | None:
    """A connection to the daemon at `path`, or None when none listens; refused when the process that answers
    is not this user's (a socket planted in a folder another user can rename). Every later operation on it has a
    deadline (DAEMON_ANSWER_S unless the caller sets another)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(DAEMON_ANSWER_S)  # a connect waits only while the listener's queue is full
    try:
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except TimeoutError:
        sock.close()
        raise _silent(path) from None
    uid = peer_uid(sock)
    if uid != os.geteuid():
        sock.close()
        raise HostUnreachable(f"the kept-connection socket {path} is answered by uid {uid}, not by you: nothing was "
                              f"sent through it. Remove {path.parent} and run again.")
    return sock


def _start_daemon(where: Path, key: str) -> None:
    """Start the daemon and wait until it listens (it prints `ready`, or `running` when another one of this key
    answers on the socket; engine/connection/persist_daemon.py _take_lock)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ENGINE.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-m", "engine.connection.persist_daemon", str(where), key], cwd=str(ENGINE.parent),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise OSError(errno.ETIMEDOUT, f"the kept-connection daemon did not start within {START_TIMEOUT_S:.0f} s")
    if proc.returncode != 0 or not out.strip():
        tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise OSError(errno.ECONNREFUSED, f"the kept-connection daemon did not start: {' | '.join(tail) or 'no word'}")


def daemon_socket() -> socket.socket:
    """A connection to this user's daemon of this code version, started first when none listens."""
    path = socket_path()
    sock = _connect_socket(path)
    if sock is None:
        with _start_lock:
            sock = _connect_socket(path)  # another host of this run may have started it meanwhile
            if sock is None:
                _start_daemon(path.parent, code_key())  # `ready` or `running`: either way one listens now
                sock = _connect_socket(path)
    if sock is None:
        raise OSError(errno.ECONNREFUSED, f"the kept-connection daemon does not answer on {path}")
    return sock


def daemon_usable() -> bool:
    """Whether this user's daemon answers or starts here, asked only where the tool's own default keeps the
    connections (the user named no ControlPersist): where it cannot (no private socket folder of this user's, a
    socket path too long, a daemon that does not start), the run connects directly, as without keeping. Asked
    once per socket path and process; an explicit ControlPersist is refused with the reason instead."""
    try:
        path = socket_path()
    except (UserError, OSError):
        return False
    if path not in _USABLE:
        with _usable_lock:
            if path not in _USABLE:
                try:
                    daemon_socket().close()
                    _USABLE[path] = True
                except DaemonSilent:
                    _USABLE[path] = True  # PersistentTransport.open bypasses it and says so
                except (HostUnreachable, OSError):
                    _USABLE[path] = False
    return _USABLE[path]


_USABLE: dict[Path, bool] = {}
_usable_lock = threading.Lock()  # the hosts of one run ask in parallel; daemon_socket() takes _start_lock


def reset(hop: Hop) -> None:
    """Drop the host's kept connection (`meta: reset_connection`): its next session logs in anew. Nothing to do
    where no daemon runs."""
    try:
        _control(socket_path(), {"reset": hop_to_json(hop)})
    except (HostUnreachable, UserError, OSError):
        return  # a daemon that does not answer: its connection stays; the run goes on with its own


def _control(path: Path, line: dict) -> bool:
    """One control line to the daemon at `path` and its answer, within DAEMON_ANSWER_S each: False when none
    listens there, DaemonSilent when it does not answer in time."""
    sock = _connect_socket(path)
    if sock is None:
        return False
    with sock:
        try:
            sock.sendall((json.dumps(line) + "\n").encode())
            sock.recv(100)
        except TimeoutError:
            raise _silent(path) from None
    return True


def stop_all() -> tuple[bool, list[str]]:
    """Close every kept connection of this user (every daemon in the folder, of any code version): whether one
    answered, and the daemons that did not (named). Each ends once the runs using it have ended."""
    stopped, silent = False, []
    for path in sorted(private_folder().glob("*.sock")):
        try:
            stopped = _control(path, {"stop": True}) or stopped
        except DaemonSilent as exc:
            silent.append(str(exc.strerror))
        except (HostUnreachable, OSError):
            continue
    return stopped, silent


def stop() -> bool:
    """stop_all(), saying only whether a daemon answered."""
    return stop_all()[0]


class PersistentTransport(Transport):
    """The host's worker through the daemon: the same requests and answers, relayed over a unix socket."""

    name = "ssh"
    persistent = True

    def __init__(self, host: Host, hop: Hop) -> None:
        super().__init__(host)
        self.hop = hop
        self.reused = False
        self._direct = None
        self._out = self._err = b""
        self.path: Path | None = None

    def open(self) -> None:
        """A session with the host's worker through the daemon; DaemonSilent (the caller connects directly) when the
        daemon does not acknowledge it within DAEMON_ANSWER_S, or does not reach the host within silent_s."""
        self.path = socket_path()
        if _known_silent(self.path):
            raise _silent(self.path)
        self.sock = daemon_socket()
        self._frames = _Frames(self._recv)
        try:
            reply = self._session(self.path)
        except (WorkerDied, ValueError, OSError) as exc:
            self.sock.close()
            if isinstance(exc, DaemonSilent):
                raise
            raise OSError(errno.ECONNABORTED, f"the kept-connection daemon ended the session: {exc}") from None
        if not reply.get("ok"):
            self.sock.close()
            raise _refusal(reply)
        self.reused = bool(reply.get("reused"))

    def _session(self, path: Path) -> dict:
        """The session's request, the daemon's `accepted` within DAEMON_ANSWER_S (else it is silent: _silent), then
        its answer once it has the host's worker, within silent_s (else DaemonSilent for this host only)."""
        request = {"hop": hop_to_json(self.hop), "start": self.start_command(), "persist_s": self.hop.persist_s,
                   "pool": runtime.host_package_hash()}
        try:
            self._send(json.dumps(request).encode() + b"\n", DAEMON_ANSWER_S)
            self._frames.line(Wait(DAEMON_ANSWER_S))  # {"accepted": true, "pid"}: the daemon is there
        except TimeoutError:
            raise _silent(path) from None
        try:
            return json.loads(self._frames.line(Wait(self.silent_s)))
        except TimeoutError:
            raise DaemonSilent(errno.ETIMEDOUT, f"{daemon_label(path)} accepted the session but did not reach "
                                                f"{self.host.name} within {self.silent_s:g} s (dfp_silent_s)") from None

    def _send(self, data: bytes, wait_s: float) -> None:
        """All of `data`; TimeoutError when the daemon takes no byte of it for wait_s (not sendall, whose timeout
        bounds the whole: a large upload through a slow link is not a silent daemon)."""
        self.sock.settimeout(wait_s)
        view = memoryview(data)
        while view:
            view = view[self.sock.send(view):]

    def _recv(self, size: int, wait_s: float) -> bytes:
        self.sock.settimeout(wait_s)
        return self.sock.recv(size)

    def _write(self, data: bytes) -> None:
        self._send(data, self.silent_s)

    def route_note(self) -> str:
        return f"; the host is reached through {daemon_label(self.path)}" if self.path else ""

    def _readline(self, wait: Wait) -> bytes:
        """The worker's next stdout line; its stderr, which comes in frames of its own, goes to stderr_tail. Frames
        are read only here: the daemon never lets what the worker writes between requests back up onto the host
        (it drops stderr past a cap while the run does not read)."""
        while b"\n" not in self._out:
            tag, data = self._frames.frame(wait)
            if tag == b"o":
                self._out += data
            elif tag == b"e":
                *lines, self._err = (self._err + data).split(b"\n")
                self.stderr_tail.extend(line.decode("utf-8", "replace") for line in lines)
            else:
                raise WorkerDied(data.decode("utf-8", "replace"))
        line, _, self._out = self._out.partition(b"\n")
        return line

    @property
    def conn(self):
        """A connection of this run's own, for what the daemon does not relay (SFTP, workers through sudo)."""
        if self._direct is None:
            from engine.connection.ssh_connect import open_connection

            self._direct = open_connection(self.host, self.hop)
        return self._direct

    def put(self, local: str, remote: str) -> None:
        sftp_put(self.conn, local, remote)

    def keep(self) -> None:
        """Leave the worker (its `release` answered) to the daemon for the next run."""
        self._send(b'{"mux": "keep"}\n', DAEMON_ANSWER_S)

    def forget(self) -> None:
        """`meta: reset_connection`: the daemon drops the host's connection; the next session logs in anew."""
        reset(self.hop)

    def close(self) -> None:
        sock = getattr(self, "sock", None)
        if sock is not None:
            sock.close()
        if self._direct is not None:
            self._direct.close()


class _Frames:
    """The daemon's side of a session: its answer line, then frames of (tag, 4-byte length, bytes)."""

    def __init__(self, recv) -> None:
        self._recv = recv  # recv(size, wait_s): TimeoutError past wait_s
        self._buf = bytearray()

    def _fill(self, size: int, wait: Wait) -> None:
        while len(self._buf) < size:
            chunk = self._recv(65536, wait())
            if not chunk:
                raise WorkerDied("the kept-connection daemon closed the session")
            self._buf += chunk

    def line(self, wait: Wait) -> bytes:
        while b"\n" not in self._buf:
            self._fill(len(self._buf) + 1, wait)
        end = self._buf.index(b"\n")
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return line

    def frame(self, wait: Wait) -> tuple[bytes, bytes]:
        self._fill(5, wait)
        size = struct.unpack(">I", self._buf[1:5])[0]
        self._fill(5 + size, wait)
        tag, data = bytes(self._buf[:1]), bytes(self._buf[5:5 + size])
        del self._buf[:5 + size]
        return tag, data


def _refusal(reply: dict) -> Exception:
    text = str(reply.get("error") or reply)
    if reply.get("kind") == "user":
        return UserError(text)
    if reply.get("kind") == "refused":
        return HostUnreachable(text)
    return OSError(errno.ECONNABORTED, text)
