"""Wait until a TCP port is open (or closed), a path exists (or is gone), or a file shows a regex.

No role or playbook uses it (vllm_server waits for the server itself) and the benchmark does not
either: it is a general module for user playbooks (tests/engine/test_general_modules_play.py runs it).

Instead of `sleep 10 && tail`: it returns as soon as the condition holds and fails with a message
that names what it waited for and for how long. Read-only: never changed. In check mode it looks
once and does not wait (an earlier task that would start the thing did not run).

Result: `elapsed_s`; with search_regex `match` (the matched text), `groups`, `match_end_offset` (byte
offset just after the match, a good `from_offset` for the next wait). A file that shrinks below the
read position (rotated or truncated) is read again from its start.
"""

from __future__ import annotations

import os
import re
import socket
import time

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "port": {"type": "int", "default": None, "help": "TCP port to watch (with host)"},
    "host": {"type": "str", "default": "127.0.0.1", "help": "address of the port"},
    "path": {"type": "path", "default": None, "help": "file or folder to watch"},
    "search_regex": {
        "type": "str",
        "default": None,
        "help": "with path: wait until the file's text matches this (Python regex, per file, MULTILINE)",
    },
    "from_offset": {
        "type": "int",
        "default": 0,
        "help": "with search_regex: only look at bytes from this offset (e.g. the log's size before a start)",
    },
    "state": {
        "type": "str",
        "default": None,
        "choices": ["started", "stopped", "present", "absent"],
        "help": "port: started or stopped; path: present or absent, with search_regex present (none: started for a "
        "port, present for a path)",
    },
    "timeout_s": {"type": "float", "default": 60.0, "help": "give up (fail) after this many seconds"},
    "delay_s": {"type": "float", "default": 0.0, "help": "wait this long before the first look"},
    "sleep_s": {"type": "float", "default": 0.1, "help": "pause between looks"},
}

CARRY_BYTES = 64 * 1024  # already-read bytes kept so a match that straddles two reads is still found
PROGRESS_EVERY_S = 5.0


def plan(args: dict) -> tuple[str, str]:
    """Validate the combination of arguments; return (kind, state) with kind port, path or regex."""
    port, path, regex, state = args["port"], args["path"], args["search_regex"], args["state"]
    if (port is None) == (path is None):
        raise ModuleError("module 'wait_for': give exactly one of 'port' (with host) or 'path' (optionally with search_regex)")
    for name in ("timeout_s", "delay_s", "sleep_s"):
        if args[name] is not None and args[name] < 0:
            raise ModuleError(f"module 'wait_for': {name} is {args[name]}; it must be 0 or more seconds")
    if args["from_offset"] < 0:
        raise ModuleError(f"module 'wait_for': from_offset is {args['from_offset']}; it must be 0 or more bytes")
    if port is not None:
        if regex is not None:
            raise ModuleError("module 'wait_for': search_regex needs 'path' (a file to read), not 'port'")
        if not 0 < port < 65536:
            raise ModuleError(f"module 'wait_for': port {port} is out of range 1-65535")
        state = state or "started"
        if state not in ("started", "stopped"):
            raise ModuleError(f"module 'wait_for': with port, state must be started or stopped, not {state!r}")
        return "port", state
    state = state or "present"
    if regex is not None:
        if state != "present":
            raise ModuleError(f"module 'wait_for': with search_regex, state must be present (or left out), not {state!r}")
        try:
            re.compile(regex)
        except re.error as exc:
            raise ModuleError(f"module 'wait_for': search_regex {regex!r} is not a valid regex: {exc}")
        return "regex", state
    if state not in ("present", "absent"):
        raise ModuleError(f"module 'wait_for': with path, state must be present or absent, not {state!r}")
    return "path", state


def describe(kind: str, state: str, args: dict) -> str:
    if kind == "port":
        return f"port {args['host']}:{args['port']} to be {'open' if state == 'started' else 'closed'}"
    if kind == "path":
        return f"{args['path']} to be {state}"
    where = f" after byte {args['from_offset']}" if args["from_offset"] else ""
    return f"{args['path']} to contain a match for {args['search_regex']!r}{where}"


def probe_port(host: str, port: int, timeout: float) -> tuple[bool, str]:
    """(open, why): whether a TCP connect succeeds."""
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout)):
            return True, "connected"
    except socket.timeout:
        return False, "connect timed out"
    except OSError as exc:
        return False, exc.strerror or str(exc)


class FileSearch:
    """Incremental regex search in a growing file, from a byte offset."""

    def __init__(self, path: str, pattern: str, offset: int) -> None:
        self.path = path
        self.rx = re.compile(pattern.encode("utf-8"), re.MULTILINE)
        self.start = offset
        self.pos = offset  # next byte to read
        self.buf = b""  # bytes from buf_start to pos, kept for matches across reads
        self.buf_start = offset
        self.size = None
        self.why = "not read yet"

    def step(self) -> re.Match | None:
        try:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                self.size = size
                if size < self.pos:  # rotated or truncated: start again at its beginning
                    self.pos = self.buf_start = 0
                    self.buf = b""
                fh.seek(self.pos)
                new = fh.read()
        except FileNotFoundError:
            self.why = "the file does not exist"
            return None
        except IsADirectoryError:
            raise ModuleError(f"module 'wait_for': {self.path} is a directory; search_regex needs a file")
        except PermissionError:
            raise ModuleError(f"module 'wait_for': cannot read {self.path} (permission denied); fix its mode or the path")
        self.why = f"no match in {max(0, (self.size or 0) - self.start)} bytes read"
        if not new and self.buf:
            return None
        self.pos += len(new)
        self.buf += new
        m = self.rx.search(self.buf)
        if m is None and len(self.buf) > CARRY_BYTES:
            drop = len(self.buf) - CARRY_BYTES
            self.buf = self.buf[drop:]
            self.buf_start += drop
        return m

    def tail(self, n: int = 5) -> str:
        lines = [ln for ln in self.buf.decode("utf-8", errors="replace").splitlines() if ln.strip()]
        return "\n".join(lines[-n:])


def run(args: dict, ctx: Context) -> dict:
    kind, state = plan(args)
    what = describe(kind, state, args)
    timeout, sleep = args["timeout_s"], max(0.01, args["sleep_s"])
    search = FileSearch(args["path"], args["search_regex"], args["from_offset"]) if kind == "regex" else None
    start = time.monotonic()
    if args["delay_s"] and not ctx.check:
        time.sleep(args["delay_s"])
    deadline = start + args["delay_s"] + timeout
    next_say = start + PROGRESS_EVERY_S
    why = ""
    while True:
        now = time.monotonic()
        if kind == "port":
            is_open, why = probe_port(args["host"], args["port"], min(1.0, max(0.05, deadline - now)))
            done = is_open == (state == "started")
            if not done and state == "stopped":
                why = "something still accepts connections"
        elif kind == "path":
            exists = os.path.lexists(args["path"])
            done = exists == (state == "present")
            why = "it exists" if exists else "it does not exist"
        else:
            m = search.step()
            done = m is not None
            why = search.why
        elapsed = round(time.monotonic() - start, 3)
        if done:
            result = {"changed": False, "elapsed_s": elapsed, "msg": f"{what}: done after {elapsed} s"}
            if kind == "regex":
                result.update(
                    match=m.group(0).decode("utf-8", errors="replace"),
                    groups=[g.decode("utf-8", errors="replace") if g is not None else None for g in m.groups()],
                    match_end_offset=search.buf_start + m.end(),
                )
            return result
        if ctx.check:
            return {
                "changed": False,
                "elapsed_s": elapsed,
                "satisfied": False,
                "msg": f"check mode: not yet {what} ({why}); a real run would wait up to {timeout} s",
            }
        now = time.monotonic()
        if now >= deadline:
            tail = search.tail() if search else ""
            quote = f"; last lines read:\n{tail}" if tail else ""
            raise ModuleError(
                f"timed out after {timeout} s (timeout_s) waiting for {what}: {why}{quote}",
                elapsed_s=elapsed,
            )
        if now >= next_say:
            ctx.say(f"waiting for {what} ({now - start:.0f} s of {timeout} s)")
            next_say = now + PROGRESS_EVERY_S
        time.sleep(min(sleep, max(0.0, deadline - now)))


if __name__ == "__main__":
    main(ARGS, run)
