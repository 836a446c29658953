"""Running one program for the command and shell task modules: what they share, written once.

The checks of their shared arguments (expect_rc, env, chdir), creates/removes (a path or a glob pattern, as
Ansible matches it), the run itself (the program in its own session, its output read on threads, a timeout that
stops its whole process group, stdin fed or /dev/null) and the result in ansible.builtin.command's fields (`cmd`,
`rc`, `stdout`, `stderr`, `stdout_lines`, `stderr_lines`, `start`, `end`, `delta`, its skip messages) beside ours
(`argv`, `ran`, `duration_s`). library/command.py and library/shell.py decide what runs; run_program does the rest.
Standard library only.
"""

from __future__ import annotations

import datetime
import glob
import os
import re
import shlex
import signal
import subprocess
import threading
import time

from dflash_host.module import ModuleError

TYPE_CHECKING = False  # true for mypy; typing itself is never imported on the host
if TYPE_CHECKING:  # annotations only
    from typing import Any, Callable

    from dflash_host.module import Context

OUTPUT_LIMIT = 64 * 1024  # characters kept of stdout and of stderr each
TAIL_LINES = 10  # lines of output quoted in a failure message
KILL_GRACE_S = 2.0  # between SIGTERM and SIGKILL of a timed-out process group
PIPE_DRAIN_S = 2.0  # how long to wait for output after the program exits (a background child may hold it)
ANSIBLE_TIME = "%Y-%m-%d %H:%M:%S.%f"  # start and end, as ansible.builtin.command writes them
_VAR = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)  # what os.path.expandvars expands


def check_argv(argv: object, module: str = "command") -> list[str]:
    """The argv as a list of strings, or a ModuleError saying how to write it."""
    if isinstance(argv, str):
        raise ModuleError(
            f"module '{module}': argument 'argv' is a string ({argv!r}); give a list instead, one item per "
            f'argument, e.g. argv: ["ls", "-l", "/tmp"], or give the command line as cmd: (split into arguments '
            f"like a shell line, but no shell runs it: no pipes or redirections)"
        )
    if not isinstance(argv, (list, tuple)) or not argv:
        raise ModuleError(
            f"module '{module}': argument 'argv' must be a non-empty list of strings, got {argv!r}; e.g. argv: [\"ls\", \"-l\"]"
        )
    out = []
    for i, item in enumerate(argv):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise ModuleError(
                f"module '{module}': argv[{i}] is {type(item).__name__} {item!r}; every item must be a "
                f"string (or a number); quote it in the task"
            )
        out.append(str(item))
    return out


def split_cmd(cmd: str, module: str = "command") -> list[str]:
    """A command line split into arguments as ansible.builtin.command splits it (shlex.split); no shell runs it."""
    try:
        words = shlex.split(cmd)
    except ValueError as exc:
        raise ModuleError(
            f"module '{module}': cmd {cmd!r} cannot be split into arguments ({exc}); check its quotes, or give "
            f"argv: a list, one item per argument"
        ) from None
    if not words:
        raise ModuleError(f"module '{module}': cmd is empty; give the program and its arguments, e.g. cmd: ls -l /tmp")
    return words


def expand_argument(word: str, environ: dict) -> str:
    """$VAR, ${VAR} (from environ; one not set stays as written) and a leading ~, as Ansible's run_command expands
    each argument (os.path.expandvars, then os.path.expanduser)."""

    def value(match: re.Match) -> str:
        name = match.group(1)
        if name.startswith("{") and name.endswith("}"):
            name = name[1:-1]
        return environ.get(name, match.group(0))

    return os.path.expanduser(_VAR.sub(value, word) if "$" in word else word)


def check_expect_rc(values: list, module: str = "command") -> list[int]:
    out = []
    for v in values:
        try:
            if isinstance(v, bool):
                raise ValueError
            out.append(int(v))
        except (TypeError, ValueError):
            raise ModuleError(f"module '{module}': expect_rc must be a list of integers, got {values!r}; e.g. expect_rc: [0, 1]")
    return out


def check_env(env: dict | None, module: str = "command") -> dict[str, str]:
    out = {}
    for key, value in (env or {}).items():
        if value is None or isinstance(value, (dict, list)):
            raise ModuleError(f"module '{module}': env[{key!r}] is {value!r}; environment values must be strings or numbers")
        if isinstance(value, bool):
            value = "1" if value else "0"
        out[str(key)] = str(value)
    return out


def _matches(pattern: str) -> bool:
    """A path or glob pattern matches something (Ansible's glob.glob; a dangling link counts, a hidden file does
    only for a pattern that names the dot)."""
    return bool(glob.glob(pattern))


def skip_reason(creates: str | None, removes: str | None, chdir: str | None = None,
                exists: Callable[[str], bool] = _matches) -> tuple[str, str] | None:
    """Why the command need not run, as (the path as given, 'exists' | 'does not exist'), or None when it must.
    creates is checked first; a relative path is taken from chdir."""

    def anchored(p: str) -> str:
        return os.path.join(chdir, p) if chdir is not None else p

    if creates is not None and exists(anchored(creates)):
        return creates, "exists"
    if removes is not None and not exists(anchored(removes)):
        return removes, "does not exist"
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


def ansible_delta(delta: datetime.timedelta) -> str:
    """H:MM:SS.ffffff, str(timedelta) as Ansible returns it (the fraction always written, hours past a day too)."""
    micro = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    seconds, micro = divmod(micro, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}.{micro:06d}"


def _reader(stream: Any, chunks: list) -> None:
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


def _spawn(argv: list[str], cwd: str | None, env: dict, stdin: str | None, module: str, program_arg: str,
           data: dict) -> subprocess.Popen:
    """The program started in its own session, or a ModuleError (with data and rc the errno, as Ansible's)."""
    try:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        where = "" if os.sep in argv[0] else " on PATH"
        raise ModuleError(f"module '{module}': program {argv[0]!r} not found{where}; install it or give its full path "
                          f"in {program_arg}", **{**data, "rc": exc.errno})
    except PermissionError as exc:
        raise ModuleError(f"module '{module}': cannot execute {argv[0]!r}: {exc}; check its mode (chmod +x)",
                          **{**data, "rc": exc.errno})
    except OSError as exc:
        raise ModuleError(f"module '{module}': cannot start {argv[0]!r}: {exc}", **{**data, "rc": exc.errno})


def execute_argv(argv: list[str], cwd: str | None, env: dict, stdin: str | None, timeout_s: float | None,
                 module: str = "command", program_arg: str = "argv[0]", data: dict | None = None) -> dict:
    """Run argv in its own session; return rc (None on timeout), stdout, stderr, start, end, delta (Ansible's
    formats), duration_s, timed_out, pipes_held_open. A program that cannot start is a ModuleError carrying data."""
    started_at = datetime.datetime.now()
    start = time.monotonic()
    proc = _spawn(argv, cwd, env, stdin, module, program_arg, data or {})
    out_chunks: list = []
    err_chunks: list = []
    readers = [
        threading.Thread(target=_reader, args=(proc.stdout, out_chunks), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr, err_chunks), daemon=True),
    ]
    for t in readers:
        t.start()
    if stdin is not None and proc.stdin is not None:
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
    ended_at = datetime.datetime.now()
    return {
        "rc": None if timed_out else proc.returncode,
        "stdout": b"".join(out_chunks).decode("utf-8", errors="replace"),
        "stderr": b"".join(err_chunks).decode("utf-8", errors="replace"),
        "start": started_at.strftime(ANSIBLE_TIME),
        "end": ended_at.strftime(ANSIBLE_TIME),
        "delta": ansible_delta(ended_at - started_at),
        "duration_s": round(time.monotonic() - start, 3),
        "timed_out": timed_out,
        "pipes_held_open": held_open,
    }


def _output(text: str, strip: bool, name: str, result: dict) -> None:
    """stdout or stderr into the result: its line ends stripped at the end (strip_empty_ends), cut to
    OUTPUT_LIMIT (with NAME_truncated_chars), and its lines."""
    text, cut = truncate(text.rstrip("\r\n") if strip else text)
    result[name], result[f"{name}_lines"] = text, text.splitlines()
    if cut:
        result[f"{name}_truncated_chars"] = cut


def run_program(module: str, argv: list[str], shown: list[str] | str, what: str, program_arg: str, args: dict,
                ctx: Context) -> dict:
    """The run of command and shell once they know what runs: argv (what is executed), shown (Ansible's `cmd`:
    the argv list before expansion, or shell's string), what (the program in messages), program_arg (where the
    program is named, for a not-found hint). args are the module's checked arguments (chdir, creates, removes,
    stdin, stdin_add_newline, strip_empty_ends, env, timeout_s, expect_rc, check_safe).

    A return code outside expect_rc (or a timeout) is returned as failed with changed true, as Ansible's result
    is (the program ran), not raised: a ModuleError would make it changed false."""
    expect_rc = check_expect_rc(args["expect_rc"], module)
    env = check_env(args["env"], module)
    base: dict[str, Any] = {"cmd": shown, "argv": argv, "rc": None, "stdout": "", "stderr": "", "stdout_lines": [],
                            "stderr_lines": [], "start": None, "end": None, "delta": None, "duration_s": 0.0,
                            "ran": False}
    chdir = args["chdir"]
    if chdir is not None and not os.path.isdir(chdir):
        raise ModuleError(f"Unable to change directory before execution: chdir {chdir!r} is not a directory on this "
                          f"host; create it or fix 'chdir' (module '{module}')", **base)
    reason = skip_reason(args["creates"], args["removes"], chdir)
    if reason:  # Ansible's words, its rc 0 and its stdout
        path, state = reason
        stdout = f"skipped, since {path} {state}"
        return {**base, "changed": False, "rc": 0, "stdout": stdout, "stdout_lines": [stdout],
                "msg": f"{'Would' if ctx.check else 'Did'} not run command since '{path}' {state}"}
    if ctx.check and not args["check_safe"]:
        guarded = args["creates"] is not None or args["removes"] is not None
        result = {**base, "rc": 0, "changed": guarded,
                  "msg": f"Command would have run if not in check mode ({what} was not run; set check_safe: true "
                         "on a read-only command to run it in check mode too)"}
        if not guarded:  # as Ansible: without creates/removes a check-mode run cannot tell, it is skipped
            result["skipped"] = True
        return result

    stdin = args["stdin"]
    if stdin and args["stdin_add_newline"]:
        stdin += "\n"
    res = execute_argv(argv, chdir, env, stdin, args["timeout_s"], module, program_arg, base)
    result = {**base, "ran": True, "rc": res["rc"], "start": res["start"], "end": res["end"], "delta": res["delta"],
              "duration_s": res["duration_s"], "changed": True}
    _output(res["stdout"], args["strip_empty_ends"], "stdout", result)
    _output(res["stderr"], args["strip_empty_ends"], "stderr", result)
    if res["pipes_held_open"]:
        ctx.warn(f"{argv[0]}: a background process still holds its output open; output after exit is not captured")
    quoted = last_lines(res["stderr"]) or last_lines(res["stdout"])
    quote = f"; last output lines:\n{quoted}" if quoted else " and printed nothing"
    if res["timed_out"]:
        return {**result, "failed": True,
                "msg": f"{what} timed out after {args['timeout_s']} s (timeout_s) and its process group was "
                       f"stopped{quote}"}
    if res["rc"] not in expect_rc:
        words = "non-zero return code" if res["rc"] != 0 else "return code 0 is not in expect_rc"
        return {**result, "failed": True,
                "msg": f"{words}: {what} exited with rc {res['rc']} (expected {', '.join(map(str, expect_rc))})"
                       f"{quote}"}
    return {**result, "msg": f"ran {what}: rc {res['rc']} in {res['duration_s']} s"}
