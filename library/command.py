"""Run a program (an argv list, never a shell string) unless its result already exists.

No role or playbook uses it: it is here for the benchmark's workload (bench/workload/ours.yaml, the
same tasks as Ansible's) and for user playbooks.

For the steps no other module covers: a one-off build, a probe whose output a later task reads.
`creates`/`removes` make it idempotent; the task's `changed_when` can refine what "changed" means.
In check mode it does not run (it says it would), unless the task marks it `check_safe` (read-only).

Result: `rc`, `stdout`, `stderr` (each cut to 64 KiB, head and tail, with a note), `duration_s`, `ran`
(false when skipped; then `rc` is null), `argv`. A return code outside `expect_rc` fails the task,
quoting the last lines of stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "argv": {
        "type": "raw",
        "required": True,
        "help": 'program and its arguments, e.g. ["uv", "venv", "/opt/env"]; a string is refused',
    },
    "chdir": {"type": "path", "default": None, "help": "working folder (relative creates/removes are taken from it)"},
    "creates": {"type": "path", "default": None, "help": "skip (changed false) when this path exists"},
    "removes": {"type": "path", "default": None, "help": "skip (changed false) when this path does not exist"},
    "env": {"type": "dict", "default": None, "help": "variables added to the inherited environment"},
    "stdin": {
        "type": "str",
        "default": None,
        "help": "text fed to the program's standard input (else it reads from /dev/null)",
    },
    "timeout_s": {
        "type": "float",
        "default": None,
        "help": "stop the program's whole process group after this many seconds; a failure",
    },
    "expect_rc": {"type": "list", "default": [0], "help": "return codes that count as success"},
    "check_safe": {"type": "bool", "default": False, "help": "the command only reads: run it in check mode too"},
}

OUTPUT_LIMIT = 64 * 1024  # characters kept of stdout and of stderr each
TAIL_LINES = 10  # lines of stderr quoted in a failure message
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL of a timed-out process group
PIPE_DRAIN_S = 2.0  # how long to wait for output after the program exits (a background child may hold it)


def check_argv(argv: object) -> list[str]:
    """The argv as a list of strings, or a ModuleError saying how to write it."""
    if isinstance(argv, str):
        raise ModuleError(
            f"module 'command': argument 'argv' is a string ({argv!r}); give a list instead, one item per "
            f'argument, e.g. argv: ["ls", "-l", "/tmp"] (no shell is used, so no quoting or pipes)'
        )
    if not isinstance(argv, (list, tuple)) or not argv:
        raise ModuleError(
            f"module 'command': argument 'argv' must be a non-empty list of strings, got {argv!r}; e.g. argv: [\"ls\", \"-l\"]"
        )
    out = []
    for i, item in enumerate(argv):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ModuleError(
                f"module 'command': argv[{i}] is {type(item).__name__} {item!r}; every item must be a "
                f"string (or a number); quote it in the task"
            )
        out.append(str(item))
    return out


def check_expect_rc(values: list) -> list[int]:
    out = []
    for v in values:
        try:
            if isinstance(v, bool):
                raise ValueError
            out.append(int(v))
        except (TypeError, ValueError):
            raise ModuleError(f"module 'command': expect_rc must be a list of integers, got {values!r}; e.g. expect_rc: [0, 1]")
    return out


def check_env(env: dict | None) -> dict[str, str]:
    out = {}
    for key, value in (env or {}).items():
        if value is None or isinstance(value, (dict, list)):
            raise ModuleError(f"module 'command': env[{key!r}] is {value!r}; environment values must be strings or numbers")
        if isinstance(value, bool):
            value = "1" if value else "0"
        out[str(key)] = str(value)
    return out


def skip_reason(creates: str | None, removes: str | None, exists=os.path.lexists) -> str | None:
    """Why the command need not run, or None when it must."""
    if creates is not None and exists(creates):
        return f"{creates} exists"
    if removes is not None and not exists(removes):
        return f"{removes} does not exist"
    return None


def truncate(text: str, limit: int = OUTPUT_LIMIT) -> tuple[str, int]:
    """Keep the head and the tail of a long output; return it and how many characters were cut."""
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    head = limit // 4
    tail = limit - head
    note = f"\n[... {cut} characters cut by the command module ...]\n"
    return text[:head] + note + text[-tail:], cut


def last_lines(text: str, n: int = TAIL_LINES) -> str:
    lines = [line for line in text.rstrip().splitlines() if line.strip()]
    return "\n".join(lines[-n:])


def _reader(stream, chunks: list) -> None:
    try:
        while True:
            data = stream.read1(65536)
            if not data:
                break
            chunks.append(data)
    except (OSError, ValueError):
        pass


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the program's own process group (started with a new session), then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def execute_argv(argv: list[str], cwd: str | None, env: dict, stdin: str | None, timeout_s: float | None) -> dict:
    """Run argv in its own session; return rc (None on timeout), stdout, stderr, duration_s, timed_out."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        where = "" if os.sep in argv[0] else " on PATH"
        raise ModuleError(f"module 'command': program {argv[0]!r} not found{where}; install it or give its full path in argv[0]")
    except PermissionError as exc:
        raise ModuleError(f"module 'command': cannot execute {argv[0]!r}: {exc}; check its mode (chmod +x)")
    except OSError as exc:
        raise ModuleError(f"module 'command': cannot start {argv[0]!r}: {exc}")
    out_chunks: list = []
    err_chunks: list = []
    readers = [
        threading.Thread(target=_reader, args=(proc.stdout, out_chunks), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr, err_chunks), daemon=True),
    ]
    for t in readers:
        t.start()
    if stdin is not None:
        try:
            proc.stdin.write(stdin.encode("utf-8"))
        except BrokenPipeError:
            pass
        finally:
            try:
                proc.stdin.close()
            except BrokenPipeError:
                pass
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop_group(proc)
    except BaseException:  # the task's own `timeout` (the worker interrupts the module): leave no process behind
        _stop_group(proc)
        raise
    held_open = False
    for t in readers:
        t.join(PIPE_DRAIN_S)
        held_open = held_open or t.is_alive()
    return {
        "rc": None if timed_out else proc.returncode,
        "stdout": b"".join(out_chunks).decode("utf-8", errors="replace"),
        "stderr": b"".join(err_chunks).decode("utf-8", errors="replace"),
        "duration_s": round(time.monotonic() - start, 3),
        "timed_out": timed_out,
        "pipes_held_open": held_open,
    }


def run(args: dict, ctx: Context) -> dict:
    argv = check_argv(args["argv"])
    expect_rc = check_expect_rc(args["expect_rc"])
    env = check_env(args["env"])
    chdir = args["chdir"]
    if chdir is not None and not os.path.isdir(chdir):
        raise ModuleError(f"module 'command': chdir {chdir!r} is not a directory on this host; create it or fix 'chdir'")

    def anchored(p: str | None) -> str | None:
        return os.path.join(chdir, p) if p is not None and chdir is not None else p

    base = {"argv": argv, "rc": None, "stdout": "", "stderr": "", "duration_s": 0.0, "ran": False}
    reason = skip_reason(anchored(args["creates"]), anchored(args["removes"]))
    if reason:
        return {**base, "changed": False, "msg": f"skipped: {reason}"}
    if ctx.check and not args["check_safe"]:
        return {
            **base,
            "changed": True,
            "msg": f"check mode: would run {argv[0]} (not run; set check_safe: true for a read-only command)",
        }

    res = execute_argv(argv, chdir, env, args["stdin"], args["timeout_s"])
    stdout, out_cut = truncate(res["stdout"])
    stderr, err_cut = truncate(res["stderr"])
    result = {
        **base,
        "ran": True,
        "rc": res["rc"],
        "stdout": stdout,
        "stderr": stderr,
        "duration_s": res["duration_s"],
    }
    if out_cut:
        result["stdout_truncated_chars"] = out_cut
    if err_cut:
        result["stderr_truncated_chars"] = err_cut
    if res["pipes_held_open"]:
        ctx.warn(f"{argv[0]}: a background process still holds its output open; output after exit is not captured")
    quoted = last_lines(res["stderr"]) or last_lines(res["stdout"])
    quote = f"; last output lines:\n{quoted}" if quoted else " and printed nothing"
    if res["timed_out"]:
        raise ModuleError(
            f"command {argv[0]} timed out after {args['timeout_s']} s (timeout_s) and its process group was stopped{quote}",
            **result,
        )
    if res["rc"] not in expect_rc:
        raise ModuleError(
            f"command {argv[0]} exited with rc {res['rc']} (expected {', '.join(map(str, expect_rc))}){quote}",
            **result,
        )
    result.update(changed=True, msg=f"ran {argv[0]}: rc {res['rc']} in {res['duration_s']} s")
    return result


if __name__ == "__main__":
    main(ARGS, run)
