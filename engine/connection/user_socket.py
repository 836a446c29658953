"""The control node's own unix sockets (the kept-connection daemon's, the resident control node's): the private
folder they live in and who answers on them.

Light C-backed stdlib modules only (os, stat, struct, fcntl, contextlib; socket when a server listens or probes)
and no other stage: the resident control node's client (dfp_cli/ansible_playbook/client.py) imports this before
anything heavy, and its whole start is milliseconds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct

from engine.cache import cache_dir
from engine.errors import UserError

SO_PEERCRED = 17  # Linux's socket option (socket.SO_PEERCRED), written here: the socket module costs the client 10 ms
SOL_SOCKET = 1


def socket_folder() -> str:
    """Where the sockets live: the user's runtime dir (XDG_RUNTIME_DIR), else the tool's cache."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(base, "dflash-provision") if base and os.path.isdir(base) else os.path.join(cache_dir(), "run")


def check_private(path: str, what: str, fix_elsewhere: str) -> None:
    """Make `path` 0700 if new; a UserError when it is not this user's own private folder (another user who could
    reach a socket there would use this user's connections or runs). `what` names the socket in the message,
    `fix_elsewhere` says how to do without it."""
    fix = "Remove it (the tool makes it again) or `chmod 700` it; nothing was sent to any host."
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError as exc:
        raise UserError(f"{path} (the folder of {what}) cannot be made: {exc.strerror or exc}. Set "
                        f"XDG_RUNTIME_DIR to a folder of yours, or {fix_elsewhere}; nothing was sent to any host.") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise UserError(f"{path} (the folder of {what}) is not a private folder of this user's: it must be a "
                        f"directory owned by you with mode 0700. {fix}")


def peer_uid(sock) -> int:
    """The uid of the process at the other end of a unix socket (SO_PEERCRED): both ends of a session check it."""
    return peer_credentials(sock)[1]


def peer_credentials(sock) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process at the other end of a unix socket, as the kernel saw it connect."""
    creds = sock.getsockopt(SOL_SOCKET, SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)


def listen_private(path: str, backlog: int):
    """A listening unix socket at `path`, readable and writable by this user only; a socket file left there by a
    process that died (the caller holds the name's lock, so none serves on it) is replaced first."""
    import socket  # the servers' only: the client never listens

    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(backlog)
    return listener


def try_key_lock(lock_path: str) -> int | None:
    """The flock of a server's key (its descriptor), or None while another process holds it. Taken again when the
    file was removed meanwhile (sweep_other_keys): the lock is the file at the path, never an unlinked one."""
    while True:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        if same_file(fd, lock_path):
            return fd
        os.close(fd)


def same_file(fd: int, path: str) -> bool:
    try:
        return os.lstat(path).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


def sweep_other_keys(folder: str, prefix: str, key: str, files: tuple[str, ...]) -> None:
    """The files that servers of other keys (`PREFIX` and 16 hex digits: one per code version) left in the private
    folder, removed once no server of that key holds its lock: the lock file, a socket nobody answers, and the
    regular files named by `files` (".pid", ".log"). Under that key's flock, so a server of it starting meanwhile
    takes a new lock file (try_key_lock)."""
    for name in os.listdir(folder):
        other, ext = os.path.splitext(name)
        digits = other[len(prefix):]
        if ext != ".lock" or other == key or not other.startswith(prefix) or len(digits) != 16 \
                or not all(c in "0123456789abcdef" for c in digits):
            continue
        lock_path = os.path.join(folder, name)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not same_file(fd, lock_path) or not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            _remove_leftovers(os.path.join(folder, other), files)
            os.unlink(lock_path)
        except OSError:
            continue  # held: that key's server serves
        finally:
            os.close(fd)


def _remove_leftovers(base: str, files: tuple[str, ...]) -> None:
    """A dead server's socket (a socket nobody answers) and its regular files."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(base + ".sock").st_mode) and not answers(base + ".sock"):
            os.unlink(base + ".sock")
    for ext in files:
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(base + ext).st_mode):
                os.unlink(base + ext)


def answers(path: str) -> bool:
    """Whether a process listens on the unix socket at `path`."""
    import socket

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
