"""What the resident control node's client and server share: which server may serve a run (its key), where it
listens, and the lines they exchange. Stdlib only: the client imports it before anything heavy.

A server serves only runs that would behave the same in a fresh process: the same python, the same code (every
file of the engine, the CLI and the host package, by name, size and time), the same user and groups, and the same
values of the variables a python or the engine reads when it starts (START_ENV). A run that differs in any of them
gets a server of its own. The rest of the environment, the working folder, the umask and the standard streams
are the run's own, handed over with each run.

  client -> server   one line {"argv", "cwd", "env", "umask"}, its first bytes carrying the client's
                     descriptors 0, 1 and 2 (SCM_RIGHTS)
  client -> child    {"signal": N}: a signal the client received (SIGINT, SIGTERM, SIGHUP), raised in the child
  child  -> client   {"exit": CODE} once the run is over
  server -> client   {"status": WAITSTATUS} once it has reaped the child (the only word when the child died)
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("engine", "dfp_cli", "dflash_host")
# Read by python itself or by the engine's modules when they are imported (engine/cache.py: HOME, XDG_CACHE_HOME;
# tempfile: TMPDIR; the standard streams' encoding: the locale variables).
START_ENV = ("HOME", "USER", "LOGNAME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "TMPDIR", "LANG", "LANGUAGE", "LC_ALL",
             "LC_CTYPE", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONWARNINGS",
             "PYTHONDONTWRITEBYTECODE", "PYTHONSAFEPATH", "TZ")
MAX_LINE = 4 << 20  # a request: argv and environment, far below this
STREAMS = (0, 1, 2)


def code_stamp() -> str:
    """Every .py file of the code a server has imported, by path, size and modification time."""
    digest = hashlib.sha256()
    for name in CODE_DIRS:
        for folder, dirs, files in os.walk(ROOT / name):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for file in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, file)
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # an editor's dangling lock link
                digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def key() -> str:
    """The server this process may use: see the module's docstring."""
    env = [(name, os.environ.get(name)) for name in START_ENV]
    who = (os.geteuid(), os.getegid(), sorted(os.getgroups()))
    text = json.dumps([sys.executable, sys.version, list(sys.flags), socket.gethostname(), who, env, code_stamp()])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def paths(folder: Path | str, server_key: str) -> dict[str, str]:
    """The server's files in the private socket folder: its socket, its lock, its pidfile and its log."""
    base = os.path.join(folder, f"resident-{server_key}")
    return {"socket": base + ".sock", "lock": base + ".lock", "pid": base + ".pid", "log": base + ".log"}


def line(message: dict) -> bytes:
    return json.dumps(message).encode() + b"\n"


class Lines:
    """Lines read from a socket, each a JSON object; None at the end of the stream."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buf = sock, b""

    def next(self) -> dict | None:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
            if len(self.buf) > MAX_LINE:
                raise ValueError("a line longer than the protocol allows")
        first, self.buf = self.buf.split(b"\n", 1)
        return json.loads(first)
