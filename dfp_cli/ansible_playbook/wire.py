"""What the resident control node's client and server share: which server may serve a run (its key), where it
listens, and what they say to each other. Only os and sys are imported: the client's start is the run's start.

A server serves only runs that would behave the same in a fresh process: the same python, the same code (every
file of the engine, the CLI and the host package, by name, size and time), the same user and groups, and the same
values of the variables a python or the engine reads when it starts (START_ENV). A run that differs in any of them
gets a server of its own. The rest of the environment, the working folder, the umask and the standard streams
are the run's own, handed over with each run.

  client -> server   the request: its length (4 bytes) and its fields separated by NUL (umask, working folder,
                     the number of arguments, the arguments, then the environment as NAME=VALUE; none of them can
                     hold a NUL), its first bytes carrying the client's descriptors 0, 1 and 2 (SCM_RIGHTS)
  server -> client   "refused REASON" (a request without the three streams), else the server forks a child
  child  -> client   "started PID", and waits for the client's "go": a client that gave up waiting (it makes the
                     run in its own process) never says it, and the child then ends without running anything
  client -> child    "go"; then "signal N": a signal the client received (SIGINT, SIGTERM, SIGHUP), raised in
                     the child
  child  -> client   "exit CODE" once the run is over
  server -> client   "status WAITSTATUS" once it has reaped the child (the only word when the child died)
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half (client.py says why): typeshed has no stub
import _socket
import os
import sys

try:
    from _blake2 import blake2b  # hashlib's own C hash, without hashlib's OpenSSL import (4 ms of the client)
except ImportError:  # another Python
    from hashlib import blake2b

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODE_DIRS = ("engine", "dfp_cli", "dflash_host")
# Read by python itself or by the engine's modules when they are imported (the cache folder: HOME, XDG_CACHE_HOME;
# tempfile: TMPDIR; the standard streams' encoding: the locale variables); and DFP_RESIDENT, the server's idle time,
# which a server is started with.
START_ENV = ("HOME", "USER", "LOGNAME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "TMPDIR", "LANG", "LANGUAGE", "LC_ALL",
             "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS",
             "PYTHONDONTWRITEBYTECODE", "PYTHONSAFEPATH", "TZ", "DFP_RESIDENT")
MAX_REQUEST = 4 << 20  # argv and environment: far below this
MAX_LINE = 4096
STREAMS = (0, 1, 2)
RELAYED = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)  # the client's signals the child gets


def code_stamp() -> bytes:
    """Every .py file of the code a server has imported, by path, size and modification time."""
    digest = blake2b(digest_size=16)
    for name in CODE_DIRS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, name)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for file in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, file)
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # an editor's dangling lock link
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.digest()


def key() -> str:
    """The server this process may use: see the module's docstring."""
    env = [(name, os.environ.get(name)) for name in START_ENV]
    who = (os.geteuid(), os.getegid(), sorted(os.getgroups()))
    text = repr((sys.executable, sys.version, tuple(sys.flags), os.uname().nodename, who, env, code_stamp().hex()))
    return blake2b(text.encode(), digest_size=8).hexdigest()


def paths(folder: str, server_key: str) -> dict[str, str]:
    """The server's files in the private socket folder: its socket, its lock, its pidfile and its log."""
    base = os.path.join(folder, f"resident-{server_key}")
    return {"socket": base + ".sock", "lock": base + ".lock", "pid": base + ".pid", "log": base + ".log"}


def encode_request(argv: list[str], cwd: str, env: dict[str, str], umask: int) -> bytes:
    fields = [str(umask), cwd, str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
    payload = "\0".join(fields).encode("utf-8", "surrogateescape")
    return len(payload).to_bytes(4, "big") + payload


def send_request(sock, argv: list[str], cwd: str, env: dict[str, str], umask: int) -> None:
    """The request, the calling process's standard streams (STREAMS) riding on its first bytes."""
    request = encode_request(argv, cwd, env, umask)
    rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in STREAMS)
    sent = sock.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)])
    sock.sendall(request[sent:])


def decode_request(payload: bytes) -> dict:
    """{"umask", "cwd", "argv", "env"}; ValueError when the fields do not add up."""
    fields = payload.decode("utf-8", "surrogateescape").split("\0")
    count = int(fields[2])
    argv, pairs = fields[3:3 + count], fields[3 + count:]
    if len(argv) != count or any("=" not in pair for pair in pairs):
        raise ValueError("a request whose fields do not add up")
    return {"umask": int(fields[0], 10), "cwd": fields[1], "argv": argv, "env": dict(p.split("=", 1) for p in pairs)}


def line(word: str, value: object) -> bytes:
    return f"{word} {value}\n".encode()


class Lines:
    """The words read from a socket, each (WORD, VALUE); None at the end of the stream."""

    def __init__(self, sock, buf: bytes = b"") -> None:
        self.sock, self.buf = sock, buf

    def next(self) -> tuple[str, str] | None:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > MAX_LINE:
                raise ValueError("a line longer than the protocol allows")
        first, self.buf = self.buf.split(b"\n", 1)
        word, _, value = first.decode("utf-8", "replace").partition(" ")
        return word, value
