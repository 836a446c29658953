"""Transports (local subprocess, SSH through Fabric) and the client side of the host worker.

Both transports start the same worker (engine/worker.py) with the same fixed bootstrap command, so
tests of `local` exercise the worker code path too. Over SSH the worker talks on one exec channel of
the open connection with TCP_NODELAY set: a task costs one JSON round trip, not a new session.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import zlib
from collections import deque
from pathlib import Path
from typing import Any, Callable

from engine.errors import HostUnreachable
from engine.inventory import Host

WORKER_SOURCE = (Path(__file__).parent / "worker.py").read_bytes()
_PAYLOAD = base64.b64encode(zlib.compress(WORKER_SOURCE, 9)) + b"\n"
# Fixed text: no value is ever interpolated into it. The worker source arrives on stdin.
BOOTSTRAP = (
    "import sys,zlib,base64;exec(compile(zlib.decompress(base64.b64decode(sys.stdin.buffer.readline())),'dfp-worker','exec'))"
)


class WorkerDied(Exception):
    """The worker's stream ended: the process died or the connection dropped."""


class _Stream:
    """Line reader over a byte source with a stderr tail kept for error messages."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._buf = b""

    def readline(self) -> bytes:
        while b"\n" not in self._buf:
            chunk = self._read(65536)
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

    # subclass API
    def open(self) -> None: ...
    def _write(self, data: bytes) -> None: ...
    def _readline(self) -> bytes:
        raise NotImplementedError
    def close(self) -> None: ...
    def put(self, local: str, remote: str) -> None: ...

    def python(self) -> str:
        return str(self.host.vars.get("ansible_python_interpreter", "python3" if self.name == "ssh" else sys.executable))

    def _drain(self, read: Callable[[int], bytes]) -> None:
        pending = b""
        while True:
            try:
                chunk = read(65536)
            except Exception:
                return
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self.stderr_tail.append(line.decode("utf-8", "replace"))

    def request(self, payload: dict, progress: Callable[[str], None] | None = None) -> dict:
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            payload = dict(payload, id=rid)
            try:
                self._write((json.dumps(payload, default=str) + "\n").encode())
                while True:
                    line = self._readline()
                    if not line.strip():
                        continue
                    try:
                        msg = json.loads(line)
                    except ValueError:
                        self.stderr_tail.append(line.decode("utf-8", "replace"))
                        continue
                    if msg.get("id") != rid:
                        continue
                    if "progress" in msg:
                        if progress:
                            progress(msg["progress"])
                        continue
                    return msg
            except (OSError, EOFError, WorkerDied) as exc:
                tail = "\n".join(list(self.stderr_tail)[-15:])
                raise WorkerDied(f"{type(exc).__name__}: {exc}" + (f"\n{tail}" if tail else "")) from None


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
        self._stream = _Stream(self.proc.stdout.read1)  # type: ignore[attr-defined]  # a BufferedReader
        self._write(_PAYLOAD)

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None  # noqa: S101 - opened as PIPE
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def _readline(self) -> bytes:
        return self._stream.readline()

    def put(self, local: str, remote: str) -> None:
        remote = os.path.expanduser(remote)
        os.makedirs(os.path.dirname(remote), exist_ok=True)
        shutil.copyfile(local, remote)

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc and proc.poll() is None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()


class _QuickAckSocket(socket.socket):
    """A TCP socket that ACKs at once on every read (Linux does not keep TCP_QUICKACK on).

    sshd sets TCP_NODELAY only for interactive sessions, so when it sends two small packets in a row
    (during key exchange; the channel confirmation then the exec reply) the second waits for our ACK of
    the first, which Linux delays by up to 40 ms. Measured: open 80 -> 25-35 ms, session+exec 48 -> 5 ms.
    """

    def recv(self, bufsize: int, *flags: int) -> bytes:
        try:
            self.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        except (OSError, AttributeError):
            pass
        return super().recv(bufsize, *flags)


def _tcp_socket(address: str, port: int, timeout: float) -> socket.socket:
    """A connected socket with TCP_NODELAY (and quick ACKs) from the first packet of the handshake."""
    last: OSError | None = None
    for family, kind, proto, _, addr in socket.getaddrinfo(address, port, type=socket.SOCK_STREAM):
        sock = _QuickAckSocket(family, kind, proto)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(timeout)
            sock.connect(addr)
            return sock
        except OSError as exc:
            sock.close()
            last = exc
    raise last or OSError(f"no address for {address}")


class _AcceptUnknown:
    """Host key policy for `ansible_host_key_checking: false`: accept, remember nothing."""

    def missing_host_key(self, client, hostname, key) -> None:  # paramiko policy API
        return None


class SSHTransport(Transport):
    name = "ssh"

    def _known_hosts_files(self) -> list[str]:
        given = self.host.vars.get("ansible_ssh_known_hosts_file")
        if given:
            return [os.path.expanduser(str(given))]
        return [p for p in (os.path.expanduser("~/.ssh/known_hosts"), "/etc/ssh/ssh_known_hosts") if os.path.exists(p)]

    def open(self) -> None:
        import paramiko
        from fabric import Connection

        v = self.host.vars
        key_file = v.get("ansible_ssh_private_key_file")
        connect_kwargs: dict[str, Any] = {}
        if key_file:
            connect_kwargs["key_filename"] = [os.path.expanduser(str(key_file))]
            connect_kwargs["look_for_keys"] = False
        if v.get("ansible_password"):
            connect_kwargs["password"] = str(v["ansible_password"])
        timeout = int(v.get("ansible_ssh_timeout", v.get("ansible_timeout", 10)))
        connect_kwargs["sock"] = _tcp_socket(self.host.address, self.host.port, timeout)
        conn = Connection(
            host=self.host.address,
            user=self.host.user,
            port=self.host.port,
            connect_timeout=timeout,
            connect_kwargs=connect_kwargs,
        )
        client = conn.client
        checking = v.get("ansible_host_key_checking", True)
        if isinstance(checking, str):
            checking = checking.strip().lower() not in ("false", "no", "0", "off")
        if checking:
            for path in self._known_hosts_files():
                try:
                    client.load_system_host_keys(path)
                except (OSError, paramiko.SSHException) as exc:
                    raise HostUnreachable(f"cannot read known_hosts file {path}: {exc}") from None
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:
            client.set_missing_host_key_policy(_AcceptUnknown())
        where = f"{self.host.user + '@' if self.host.user else ''}{self.host.address}:{self.host.port}"
        try:
            conn.open()
        except paramiko.BadHostKeyException as exc:
            files = ", ".join(self._known_hosts_files()) or "~/.ssh/known_hosts"
            raise HostUnreachable(
                f"host key of {where} CHANGED: it offered {exc.key.get_name()} {exc.key.get_fingerprint().hex()}, "
                f"known_hosts ({files}) has another key. This may be an attack, or the host was rebuilt; "
                f"if you know it was rebuilt, remove the old key with "
                f"ssh-keygen -R {shlex.quote(self._known_name())} -f FILE and add the new one."
            ) from None
        except paramiko.SSHException as exc:
            text = str(exc)
            if "not found in known_hosts" in text or "Server " in text and "not found" in text:
                files = ", ".join(self._known_hosts_files()) or "~/.ssh/known_hosts (missing)"
                raise HostUnreachable(
                    f"host key of {where} is unknown (not in {files}); refusing to connect. Add it after "
                    f"checking its fingerprint (ssh-keyscan -p {self.host.port} {self.host.address} >> ~/.ssh/known_hosts), "
                    "set ansible_ssh_known_hosts_file, or set ansible_host_key_checking: false for this host."
                ) from None
            if isinstance(exc, paramiko.AuthenticationException):
                raise HostUnreachable(
                    f"authentication to {where} failed ({text}); check ansible_user and ansible_ssh_private_key_file"
                ) from None
            raise
        self.conn = conn
        transport = client.get_transport()
        transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_keepalive(15)
        self.chan = transport.open_session()
        self.chan.exec_command(f"{shlex.quote(self.python())} -u -c {shlex.quote(BOOTSTRAP)}")
        threading.Thread(target=self._drain, args=(self.chan.recv_stderr,), daemon=True).start()
        self._stream = _Stream(self.chan.recv)
        self._write(_PAYLOAD)

    def _known_name(self) -> str:
        return self.host.address if self.host.port == 22 else f"[{self.host.address}]:{self.host.port}"

    def _write(self, data: bytes) -> None:
        self.chan.sendall(data)

    def _readline(self) -> bytes:
        return self._stream.readline()

    def put(self, local: str, remote: str) -> None:
        sftp = self.conn.sftp()
        if remote.startswith("~/"):
            remote = remote[2:]  # sftp starts in the user's home
        sftp.put(local, remote)

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


def connect(host: Host) -> Transport:
    """Open a transport for a host. Connection errors other than refusals propagate for retry."""
    kind = host.connection
    if kind == "local":
        t: Transport = LocalTransport(host)
    elif kind in ("ssh", "paramiko", "smart"):
        t = SSHTransport(host)
    else:
        raise HostUnreachable(f"ansible_connection '{kind}' is not supported; use ssh or local")
    t.open()
    return t
