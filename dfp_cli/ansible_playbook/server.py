"""The resident control node: one process per user and key (wire.py) that has imported the engine once and forks
a child per run (child.py), so a run costs a fork instead of a python start and the engine's imports.

Started by the first client that finds none (client.py); listens on a unix socket in the user's private socket
folder and serves only its own user (SO_PEERCRED). It runs nothing of a run itself: it reads the request, forks,
and the child takes the request's streams, folder and environment. It holds no host, lock or connection, and
ends DFP_RESIDENT seconds after its last run ended, or at once when its socket is no longer its own.

  python -m dfp_cli.ansible_playbook.server FOLDER KEY PERSIST_S
"""

from __future__ import annotations

import array
import contextlib
import os
import select
import socket
import sys
import time

from dfp_cli.ansible_playbook import wire
from engine.connection.user_socket import listen_private, peer_credentials, sweep_other_keys, try_key_lock

TICK_S = 0.5
REQUEST_S = 10.0  # a client sends its request at once; one that does not is dropped
# What a run imports, imported once here (the engine's own imports are lazy where a run may not need them).
PRELOAD = ("dfp_cli.ansible_playbook.flags", "dfp_cli.commands", "dfp_cli.fast_exit", "dfp_cli.rebuild_report",
           "dfp_cli.ansible_playbook.child", "engine.api")


def main(argv: list[str]) -> int:
    files, persist_s = wire.paths(argv[0], argv[1]), float(argv[2])
    lock_fd = try_key_lock(files["lock"])
    if lock_fd is None:
        return 0  # another server of this key serves: the client connects to it
    for name in PRELOAD:
        __import__(name)
    os.chdir("/")  # never keep a user's folder busy
    server = Server(listen_private(files["socket"], 64), files["socket"], lock_fd)
    with os.fdopen(os.open(files["pid"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w") as f:
        f.write(str(os.getpid()))
    with contextlib.suppress(OSError):  # what servers of other code versions left (a key each), once they ended
        sweep_other_keys(argv[0], "resident-", f"resident-{argv[1]}", (".pid", ".log"))
    server.serve(persist_s)
    with contextlib.suppress(OSError):
        os.unlink(files["pid"])
    os.close(lock_fd)
    return 0


class Server:
    """The listening socket, the key's lock and the runs in flight (child pid -> its client's connection)."""

    def __init__(self, listener: socket.socket, path: str, lock_fd: int) -> None:
        self.listener, self.path, self.lock_fd = listener, path, lock_fd
        self.ino = os.lstat(path).st_ino
        self.runs: dict[int, socket.socket] = {}

    def serve(self, persist_s: float) -> None:
        """Accept runs until none has been in flight for persist_s, or the socket is no longer this server's."""
        last = time.monotonic()
        while True:
            if select.select([self.listener], [], [], TICK_S)[0]:
                with contextlib.suppress(OSError):
                    conn, _ = self.listener.accept()
                    self.serve_one(conn)
            self.reap()
            if self.runs:
                last = time.monotonic()
            elif time.monotonic() - last >= persist_s or not _still_ours(self.path, self.ino):
                break
        with contextlib.suppress(OSError):
            if _still_ours(self.path, self.ino):
                os.unlink(self.path)
        self.listener.close()

    def serve_one(self, conn: socket.socket) -> None:
        """Read one request and fork its child; the connection is kept to tell the client how the child ended."""
        try:
            client_pid, client_uid, _gid = peer_credentials(conn)
            if client_uid != os.geteuid():
                conn.close()
                return
            request, fds = _request(conn)
        except (OSError, ValueError):
            conn.close()
            return
        if len(fds) != len(wire.STREAMS):
            _refuse(conn, fds, "the request did not carry the three standard streams")
            return
        pid = os.fork()
        if pid == 0:
            self.leave_to(conn)
            from dfp_cli.ansible_playbook.child import run_request

            run_request(conn, request, fds, client_pid)  # never returns
        for fd in fds:
            os.close(fd)  # the child's now: a copy kept here would hold the client's pipes open
        self.runs[pid] = conn  # the child says `started` and waits for the client's `go` (child.agreed)

    def leave_to(self, conn: socket.socket) -> None:
        """In a child: close what is the server's (the listener, the key's lock: a child holding it would keep a
        new server from starting; other runs' connections), keeping only its own client's."""
        self.listener.close()
        os.close(self.lock_fd)
        for other in self.runs.values():
            other.close()

    def reap(self) -> None:
        """Tell each ended child's client how it ended (a child that said its exit code already: the client is gone)."""
        while self.runs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.runs.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(wire.line("status", status))
                conn.close()


def _request(conn: socket.socket) -> tuple[dict, list[int]]:
    """The request and the descriptors that came with its first bytes, within REQUEST_S."""
    conn.settimeout(REQUEST_S)
    fds = array.array("i")
    data, ancillary, _flags, _addr = conn.recvmsg(65536, socket.CMSG_SPACE(len(wire.STREAMS) * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    try:
        if len(data) < 4 or int.from_bytes(data[:4], "big") > wire.MAX_REQUEST:
            raise ValueError("no request")
        size, data = int.from_bytes(data[:4], "big"), data[4:]
        while len(data) < size:
            chunk = conn.recv(min(size - len(data), 1 << 20))
            if not chunk:
                raise ValueError("a request cut short")
            data += chunk
        request = wire.decode_request(data[:size])
    except (OSError, ValueError, IndexError):
        for fd in fds:
            os.close(fd)
        raise ValueError("no request") from None
    conn.settimeout(None)
    return request, list(fds)


def _refuse(conn: socket.socket, fds: list[int], reason: str) -> None:
    for fd in fds:
        os.close(fd)
    with contextlib.suppress(OSError):
        conn.sendall(wire.line("refused", reason))
    conn.close()


def _still_ours(path: str, ino: int) -> bool:
    try:
        return os.lstat(path).st_ino == ino
    except OSError:
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
