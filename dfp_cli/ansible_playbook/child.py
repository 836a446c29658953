"""A run of the resident control node: the server's fork, which takes the client's request as its own (the
client's standard streams, working folder, umask, environment and argv) and runs the command line as the client
would have run it in its own process (flags.run).

The client stays its stand-in: a signal it gets is raised here, and when it is gone (killed, its terminal closed)
this process ends at once, as the client's own process would have: its workers see their stdin close and stop,
and the kernel drops the host locks it held (docs/RELIABILITY.md).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import threading
import traceback
from typing import NoReturn

from dfp_cli.ansible_playbook import wire
from dfp_cli.ansible_playbook.flags import run
from dfp_cli.fast_exit import settle

GO_S = 10.0  # the client answers `started` at once; one that does not has given up and runs the playbook itself


def run_request(conn: socket.socket, request: dict, fds: list[int], client_pid: int) -> NoReturn:
    code = 1
    lines = wire.Lines(conn)
    if not agreed(conn, lines):
        os._exit(0)  # the client runs it in its own process, or is gone: nothing of the run happened here
    try:
        adopt(request, fds, client_pid)
        threading.Thread(target=stand_in, args=(lines,), name="resident-client", daemon=True).start()
        code = run_argv(request["argv"])
    except BaseException:  # noqa: BLE001 - this process must end through os._exit below, whatever happened
        traceback.print_exc()
    settle()
    try:
        conn.sendall(wire.line("exit", code))
    except OSError:
        pass
    os._exit(code)


def agreed(conn: socket.socket, lines: wire.Lines) -> bool:
    """`started PID` said, and the client's `go` heard within GO_S: from then on the run is this process's and
    the client never makes it itself, so a run happens once whatever fails, the server included."""
    try:
        conn.sendall(wire.line("started", os.getpid()))
        conn.settimeout(GO_S)
        answer = lines.next()
        conn.settimeout(None)
    except (OSError, ValueError):
        return False
    return answer == ("go", "")


def adopt(request: dict, fds: list[int], client_pid: int) -> None:
    """The client's streams, folder, umask, environment and argv, in place of the server's; DFP_RESIDENT_RUN
    tells this run's workers whom it runs for (a run started by a task of a run holding the host lock is let in
    by its ancestors: engine/connection/worker.py started_by_holder)."""
    for target, fd in zip(wire.STREAMS, fds):
        os.dup2(fd, target)
        os.close(fd)
    os.umask(int(request["umask"]))
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ["DFP_RESIDENT_RUN"] = f"{os.getpid()}:{client_pid}"
    tempfile.tempdir = None  # TMPDIR is the key's, but a value chosen before the fork would be the server's
    sys.argv = ["ansible-playbook", *request["argv"]]
    # as python sets it at start (the server's stdout was /dev/null); sys.stdout is a TextIOWrapper here
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # type: ignore[union-attr]
    os.chdir(request["cwd"])


def run_argv(argv: list[str]) -> int:
    """flags.run's code, where it ends by SystemExit as the client's own process would."""
    try:
        return run(argv)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1


def stand_in(lines: wire.Lines) -> None:
    """The client's word, read for the rest of the run: a signal it got is raised here; its end ends this
    process at once."""
    while True:
        try:
            message = lines.next()
        except (OSError, ValueError):
            message = None
        if message is None:
            os.kill(os.getpid(), signal.SIGKILL)
            return
        word, value = message
        if word == "signal" and value.isdigit() and int(value) in wire.RELAYED:
            # to the main thread: a SIGINT must interrupt the call it waits in, as Ctrl-C does in the client's own
            signal.pthread_kill(threading.main_thread().ident, int(value))  # type: ignore[arg-type]
