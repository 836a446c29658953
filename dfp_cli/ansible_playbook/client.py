"""The client of the resident control node: hands one ansible-playbook command line to the server (its argv,
working folder, environment, umask and standard streams), relays the signals it receives, and exits with the
run's code. Where no server can serve it (DFP_RESIDENT=0, a terminal on stdin, -K, a folder that is not private,
a server that does not start or answer in time) the run is made in this process instead, as if the server did
not exist: nothing of it started elsewhere (the server says `started` before anything runs).

Its start is the run's start, so it imports what a bare python has (os, sys, time) and the C halves of socket and
signal (_socket, _signal): their Python wrappers (enums, selectors) cost more than the rest of the client.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half: typeshed has no stub of its own
import _socket
import os
import sys
import time

from dfp_cli.ansible_playbook import wire
from engine.connection.user_socket import check_private, peer_uid, socket_folder
from engine.errors import UserError

DEFAULT_PERSIST_S = 60.0
ANSWER_S = 10.0  # a live server answers a request at once (milliseconds); past this it is bypassed
START_S = 15.0  # a new server imports the engine first (a second here; more on a loaded machine)
GONE_GRACE_S = 2.0  # the child ended and neither it nor the server said how: the run's end is unknown
VALUE_SHORT_FLAGS = "ietlfcu"  # ansible-playbook's one-letter flags that take a value (`-eK=1` is -e's value)


def main(argv: list[str]) -> int:
    persist_s = persist_seconds()
    if persist_s > 0 and not needs_terminal(argv):
        code = served(argv, persist_s)
        if code is not None:
            return code
    from dfp_cli.ansible_playbook.flags import run
    from dfp_cli.fast_exit import exit_now

    exit_now(run(argv))
    return 0  # not reached: exit_now ends the process


def persist_seconds() -> float:
    """DFP_RESIDENT: seconds the server stays after its last run (0: none is used); a value that is no number
    is named on stderr and the run is made here."""
    text = os.environ.get("DFP_RESIDENT", "").strip()
    if not text:
        return DEFAULT_PERSIST_S
    try:
        return max(0.0, float(text))
    except ValueError:
        warn(f"DFP_RESIDENT={text!r} is not a number of seconds (e.g. 60, or 0 for none); this run is made in its "
             "own process")
        return 0.0


def needs_terminal(argv: list[str]) -> bool:
    """Whether the run may ask something on a terminal: stdin is one, or -K asks for the sudo password. The
    server's child has no controlling terminal, so such a run is made here."""
    if os.isatty(0):
        return True
    for arg in argv:
        if arg == "--":
            break
        if arg == "--ask-become-pass":
            return True
        if arg.startswith("-") and not arg.startswith("--"):
            for letter in arg[1:]:
                if letter == "K":
                    return True
                if letter in VALUE_SHORT_FLAGS:
                    break
    return False


def warn(text: str) -> None:
    print(f"[WARNING]: {text}", file=sys.stderr, flush=True)


def served(argv: list[str], persist_s: float) -> int | None:
    """The run's exit code, made by the server; None when no server took it (nothing of it ran)."""
    try:
        folder = socket_folder()
        check_private(folder, "the resident control node's socket", "set DFP_RESIDENT=0")
        server_key = wire.key()
        sock = connect(wire.paths(folder, server_key)["socket"]) or start_server(folder, server_key, persist_s)
    except (UserError, OSError) as exc:
        warn(f"the resident control node is not used for this run: {exc}")
        return None
    if sock is None:
        return None
    try:
        child = hand_over(sock, argv)
        return None if child is None else outcome(sock, child)
    finally:
        sock.close()


def connect(path: str):
    """A connection to the server at `path`, or None when none listens; refused (OSError) when the process that
    answers is not this user's."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(ANSWER_S)
    try:
        sock.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError:
        sock.close()
        raise
    if peer_uid(sock) != os.geteuid():
        sock.close()
        raise OSError(f"{path} is answered by another user's process: nothing was sent to it")
    return sock


def start_server(folder: str, server_key: str, persist_s: float):
    """Start a server (it exits at once where another one of this key holds the lock) and connect to it once it
    listens; None when none does within START_S (its log says why)."""
    import subprocess  # only when a server starts: its import is a tenth of the client's whole start

    files = wire.paths(folder, server_key)
    log = os.open(files["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "dfp_cli.ansible_playbook.server", folder, server_key,
                                 str(persist_s)], cwd=wire.ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=log, start_new_session=True)
    finally:
        os.close(log)
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        sock = connect(files["socket"])
        if sock is not None:
            return sock
        if proc.poll() not in (None, 0):
            break
        time.sleep(0.01)
    warn(f"the resident control node did not start (see {files['log']}); this run is made in its own process")
    return None


def hand_over(sock, argv: list[str]) -> int | None:
    """Send the request with this process's standard streams; the child's pid once it said `started` and heard
    `go`, None when no child answered in time or the server refused (then nothing of the run started)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        wire.send_request(sock, argv, os.getcwd(), dict(os.environ), umask)
        answer = wire.Lines(sock).next()
    except (OSError, ValueError):
        answer = None
    if answer is None or answer[0] != "started":
        if answer and answer[0] == "refused":
            warn(f"the resident control node refused the run ({answer[1]}); it is made in its own process")
        return None
    try:
        sock.sendall(wire.line("go", ""))  # from here on the run is the child's: never made here as well
    except OSError:
        return None  # the child is gone before it heard `go`: nothing of the run happened there
    return int(answer[1])


def outcome(sock, child: int) -> int:
    """Relay signals to the child until the run's exit code arrives (from the child, or from the server that
    reaped it)."""
    for signum in wire.RELAYED:
        _signal.signal(signum, lambda n, _frame: _forward(sock, n))
    sock.settimeout(1.0)
    lines, gone_since = wire.Lines(sock), None
    while True:
        try:
            message = lines.next()
        except TimeoutError:
            if _alive(child):
                continue
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since < GONE_GRACE_S:
                continue
            message = None
        except (OSError, ValueError):
            message = None
        if message is None:
            print("[ERROR]: the resident control node's run ended without an exit code", file=sys.stderr)
            return 1
        word, value = message
        if word == "exit":
            return int(value)
        if word == "status":
            code = os.waitstatus_to_exitcode(int(value))
            return 128 - code if code < 0 else code


def _forward(sock, signum: int) -> None:
    try:
        sock.sendall(wire.line("signal", signum))
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
