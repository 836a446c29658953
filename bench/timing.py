"""Small timing helpers: a timed subprocess, min/median of repetitions, rounding for reports, a progress log."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from typing import Callable


def log(msg: str) -> None:
    """A time-stamped progress line on stdout (a full run takes many minutes)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


PROJECT_CODE = ("tasks.py", "engine", "dfp_cli", "dflash_host", "library")


def compile_tree(tree: str | os.PathLike) -> None:
    """Compile a project tree's Python to bytecode once, before anything is timed. The peers are installed
    packages, which pip compiles at install; a user's checkout compiles itself on its first run. On machines
    that set PYTHONDONTWRITEBYTECODE=1 (as CI and this benchmark's machines do) a checkout never does, and each
    CLI run would compile the engine again: the benchmark compares like with like by compiling first."""
    import compileall

    for name in PROJECT_CODE:
        path = os.path.join(tree, name)
        if os.path.isdir(path):
            compileall.compile_dir(path, quiet=1, workers=0)
        elif os.path.isfile(path):
            compileall.compile_file(path, quiet=1)


class RunFailed(Exception):
    """A timed command exited non-zero; the message holds its last output lines."""


def run_timed(argv: list[str], env: dict | None = None, cwd: str | None = None, timeout: float = 300) -> tuple:
    """(wall seconds, output) of one process run from spawn to exit; RunFailed on a non-zero exit."""
    started = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout
    )
    wall = time.perf_counter() - started
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise failed_run(argv, proc.returncode, out)
    return wall, out


def failed_run(argv: list[str], code: int, out: str) -> RunFailed:
    """The error of a timed process that exited non-zero: its command, the first hosts' failure lines (Ansible's
    `fatal: [h]: FAILED! => {...}` / `UNREACHABLE!` and a loop item's `failed: [h] (item=...) => {...}`, the
    message inside: a 1,000-host recap would hide them) and the last lines it printed."""
    lines = out.strip().splitlines()
    problems = [line for line in lines if line.startswith(("fatal: [", "failed: ["))][:5]
    tail = "\n".join(lines[-12:])
    return RunFailed(f"{' '.join(argv[:3])} ... exited {code}:\n" + "".join(p + "\n" for p in problems) + tail)


def stats(samples: list[float]) -> dict:
    """{"min", "median", "n", "samples"} in seconds, rounded to the millisecond."""
    if not samples:
        return {"min": None, "median": None, "n": 0, "samples": []}
    return {
        "min": round(min(samples), 4),
        "median": round(statistics.median(samples), 4),
        "n": len(samples),
        "samples": [round(s, 4) for s in samples],
    }


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    """a / b, or None when either is missing (a part that could not run)."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)


def stop_daemons() -> None:
    """Close the connections this user's runs kept (the tool's default), as a pool of hosts goes away: idle, they
    would still cost the daemon CPU inside a later section's runs."""
    from engine.api import persist
    from engine.errors import UserError

    try:
        persist.stop()
    except (OSError, UserError) as exc:
        log(f"could not stop the kept-connection daemon: {exc}")


def _daemons() -> list:
    """This user's kept-connection daemons (engine/connection/persist_daemon.py) as psutil processes, found by their pid
    files and checked by their command line (not a PID reused since)."""
    import psutil

    from engine.api import persist
    found = []
    for pidfile in persist.folder().glob("*.pid"):
        try:
            proc = psutil.Process(int(pidfile.read_text()))
            if any(arg.endswith("persist_daemon") for arg in proc.cmdline()):  # engine.connection.persist_daemon, or
                # engine.persist_daemon in a tree from before the stages (bench/compare.py compares both)
                found.append(proc)
        except (OSError, ValueError, psutil.Error):
            continue
    return found


def _over_daemons(measure: Callable) -> float:
    """The sum of `measure(process)` over this user's daemons, skipping one that ends meanwhile."""
    import psutil

    total = 0.0
    for proc in _daemons():
        try:
            total += measure(proc)
        except psutil.Error:
            continue
    return total


def daemon_cpu() -> float:
    """CPU seconds used so far by this user's kept-connection daemons: they outlive the CLI, so the CLI's own
    rusage does not hold their share of a run."""
    return _over_daemons(lambda proc: sum(proc.cpu_times()[:2]))  # user + system


def daemon_rss_kib() -> int:
    """The resident memory of this user's kept-connection daemons now, KiB."""
    return int(_over_daemons(lambda proc: proc.memory_info().rss // 1024))


def tree_cpu(pids: list[int]) -> float:
    """CPU seconds used so far by these processes and all their descendants, dead or alive.

    A process's own time plus that of the children it has reaped (cutime/cstime, which include the
    grandchildren those reaped), summed over it and its live descendants: each second is counted
    once, so the difference of two readings is what the tree used in between. Used on the sshd
    listeners of the pool: the host side of a run (sshd sessions, shells, workers, modules).
    """
    import psutil

    total = 0.0
    seen: set[int] = set()
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root] + root.children(recursive=True)
        except psutil.Error:
            continue
        for p in procs:
            if p.pid in seen:
                continue
            seen.add(p.pid)
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            total += t.user + t.system + t.children_user + t.children_system
    return total


def own_cpu(children: bool) -> float:
    """CPU seconds of this process (children=False) or of its reaped children (True)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
