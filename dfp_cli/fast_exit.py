"""How the CLI ends: once every task of the command line has run, the process exits without Python's teardown.

Tearing down the interpreter (every module of Invoke, Jinja2, the engine; their objects) cost about 25 ms of each
`invoke play` on 2 cores, a sixth of a no-change run on one host. Nothing of ours needs it: the engine closes its
connections and writes its reports and caches before run_playbook returns. What a teardown would still do is done
here first: atexit handlers (lookup caches, logging), the threads the run left (a pool's idle workers, an early
connection still being made, which changes nothing on a host) given a moment, stdout and stderr flushed. Only for
the `invoke` program itself: an Executor used in-process (a test, another program) returns as Invoke's does.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time

from invoke import Executor, Exit

THREADS_WAIT_S = 2.0


class FastExitExecutor(Executor):
    """Invoke's Executor, named in the project's invoke.json (`tasks.executor_class`, Invoke's own setting for it),
    that ends the process after the command line's last task."""

    def execute(self, *tasks):
        if not _is_the_cli():
            return super().execute(*tasks)
        try:
            super().execute(*tasks)
        except Exit as exc:  # as Invoke's Program ends on it: its message on stderr, its code
            if exc.message:
                print(exc.message, file=sys.stderr)
            exit_now(exc.code)
        exit_now(0)


def _is_the_cli() -> bool:
    """True when this process is the `invoke` command (its script or `python -m invoke`)."""
    from invoke.main import program

    return getattr(sys.modules.get("__main__"), "program", None) is program


def exit_now(code: int) -> None:
    """End the process with `code` after what a normal exit does that matters (settle)."""
    if settle():
        os._exit(code)
    sys.exit(code)  # another Python: the usual end


def settle() -> bool:
    """What a normal exit does that matters: the threads left (bounded), atexit handlers, the standard streams.
    False on a Python without CPython's atexit._run_exitfuncs (nothing done: end it the usual way)."""
    deadline = time.monotonic() + THREADS_WAIT_S
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    run_exit_handlers = getattr(atexit, "_run_exitfuncs", None)  # CPython's own, as it runs them at exit
    if run_exit_handlers is None:
        return False
    run_exit_handlers()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`| head`): nothing more can reach it
            pass
    return True
