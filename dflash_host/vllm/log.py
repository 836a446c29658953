"""The vLLM server log: rotation, the start marker, reading only the new process's output, fatal lines.

- Rotation renames the old log with a timestamp (a process still writing it keeps writing the renamed
  file through its open descriptor, so the new log never sees its output) and keeps `keep` rotated
  files; a rotated file that some process still holds open is never deleted.
- The new log starts with a marker line naming the new server's PID; every check reads only the bytes
  after that marker, through a descriptor on the new file.
- Fatal lines and the root cause: vLLM prints the FIRST exception (the real cause) and then, as the
  error travels up through EngineCore and the API server, further tracebacks that only say "see root
  cause above". The root cause quoted is the first traceback's exception.

Standard library only.
"""

from __future__ import annotations

import os
import re
import stat
import time

from dflash_host.host.paths import managed_path
from dflash_host.module import ModuleError

MARKER_PREFIX = "=== dflash-provision: vLLM server start"
_MARKER_RE = re.compile(r"^=== dflash-provision: vLLM server start pid=(?P<pid>\d+) launch=(?P<launch>\S+)")

# `(EngineCore_DP0 pid=12) ERROR 11-30 10:51:00 [core.py:1510] message` -> proc, message
_PREFIX_RE = re.compile(
    r"^(?:\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\)\s?)?"
    r"(?:(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s?)?"
)

FATAL_PATTERNS = [
    (re.compile(r"EngineCore failed to start"), "EngineCore failed to start"),
    (re.compile(r"Engine core initialization failed"), "Engine core initialization failed"),
    (re.compile(r"WorkerProc failed to start"), "a worker failed to start"),
    (re.compile(r"EngineCore encountered a fatal error|EngineDeadError"), "the engine died"),
    (re.compile(r"CUDA out of memory|OutOfMemoryError"), "CUDA out of memory"),
    (
        re.compile(r"larger than the available KV cache memory|No available memory for the cache blocks"),
        "the KV cache does not fit",
    ),
    (re.compile(r"^Traceback \(most recent call last\):"), "a Traceback"),
    (re.compile(r"^\S+\.py: error: "), "vLLM rejected its command line"),
]

_EXC_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?P<cls>[A-Za-z_]\w*)(?::\s.*|:)?$")
_CHAIN_LINES = (
    "During handling of the above exception",
    "The above exception was the direct cause",
)
QUOTE_WIDTH = 400


def split_prefix(line: str) -> tuple:
    """(process key such as 'EngineCore pid=12' or '', message without the log prefix)."""
    m = _PREFIX_RE.match(line)
    proc = f"{m.group('proc')} pid={m.group('pid')}" if m and m.group("pid") else ""
    return proc, line[m.end() :] if m else line


def marker_line(pid: int, launch_id: str, stamp: str | None = None) -> str:
    """The first line of a new log. Only f-string formatting: it runs in the child between fork and exec."""
    if stamp is None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    return f"{MARKER_PREFIX} pid={pid} launch={launch_id} at {stamp} ==="


def parse_marker(line: str) -> dict | None:
    m = _MARKER_RE.match(line)
    return {"pid": int(m.group("pid")), "launch": m.group("launch")} if m else None


def find_fatal(lines: list) -> int | None:
    """Index of the first fatal line, or None."""
    for i, line in enumerate(lines):
        _, msg = split_prefix(line)
        for pattern, _label in FATAL_PATTERNS:
            if pattern.search(msg):
                return i
    return None


def fatal_label(line: str) -> str:
    _, msg = split_prefix(line)
    for pattern, label in FATAL_PATTERNS:
        if pattern.search(msg):
            return label
    return "a fatal line"


def _clip(text: str) -> str:
    text = text.rstrip()
    return text if len(text) <= QUOTE_WIDTH else text[: QUOTE_WIDTH - 3] + "..."


def is_exception_line(msg: str) -> bool:
    """`ValueError: ...`, `pydantic_core._pydantic_core.ValidationError: ...`, `KeyboardInterrupt`."""
    m = _EXC_LINE.match(msg)
    if not m:
        return False
    cls = m.group("cls")
    return cls[0].isupper() and not cls.isupper()


def first_exception(lines: list, scan: int = 2000) -> list | None:
    """The first traceback's last frame and exception line(s), read within one process's output.

    Returns the quoted lines, or None when the log holds no complete traceback yet.
    """
    for start, line in enumerate(lines):
        proc, msg = split_prefix(line)
        if not msg.startswith("Traceback (most recent call last):"):
            continue
        last_frame: list = []
        for j in range(start + 1, min(len(lines), start + scan)):
            p, m = split_prefix(lines[j])
            if p != proc or not m.strip():
                continue  # another process's line interleaved, or a blank line
            if m.startswith("  File "):
                last_frame = [m]
            elif m.startswith(" "):
                if len(last_frame) == 1 and not set(m.strip()) <= set("^~ "):
                    last_frame.append(m)  # the source line of the last frame
            elif any(m.startswith(c) for c in _CHAIN_LINES):
                break  # a traceback that ended without an exception line we recognise
            elif is_exception_line(m):
                quoted = [m]
                for k in range(j + 1, min(j + 6, len(lines))):
                    p2, m2 = split_prefix(lines[k])
                    if p2 != proc or not m2.startswith(" ") or m2.lstrip().startswith("File "):
                        break
                    quoted.append(m2)
                    if len(quoted) >= 3:
                        break
                return [_clip(x) for x in last_frame + quoted]
        return None
    return None


def root_cause(lines: list, tail: int = 8) -> list:
    """What to quote when the server failed: the first exception, else the fatal lines, else the tail."""
    exc = first_exception(lines)
    if exc:
        return exc
    idx = find_fatal(lines)
    if idx is not None:
        return [_clip(split_prefix(x)[1]) for x in lines[idx : idx + 3] if x.strip()]
    rest = [x for x in lines if x.strip()]
    return [_clip(split_prefix(x)[1]) for x in rest[-tail:]]


def resolved_architectures(lines: list) -> list:
    out = []
    for line in lines:
        _, msg = split_prefix(line)
        if msg.startswith("Resolved architecture: "):
            out.append(msg[len("Resolved architecture: ") :].strip())
    return out


class LogTail:
    """Read the lines a file gains after an offset, through one descriptor (renames do not matter)."""

    def __init__(self, path: str, offset: int = 0) -> None:
        self.path = path
        self._fh = open(path, "rb")  # noqa: SIM115 - kept open on purpose, closed by close()
        self._fh.seek(offset)
        self.inode = os.fstat(self._fh.fileno()).st_ino
        self._partial = b""
        self.lines: list = []

    def poll(self) -> list:
        data = self._fh.read()
        if not data:
            return []
        data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()
        new = [p.decode("utf-8", "replace").rstrip("\r") for p in parts]
        self.lines.extend(new)
        return new

    def all_lines(self) -> list:
        """Complete lines plus a trailing partial one (a crash may leave the last line unterminated)."""
        self.poll()
        extra = [self._partial.decode("utf-8", "replace")] if self._partial.strip() else []
        return self.lines + extra

    def close(self) -> None:
        self._fh.close()


def lines_after_marker(path: str, pid: int, max_bytes: int = 4 * 1024 * 1024) -> list | None:
    """Lines written after the LAST start marker naming `pid` in the log at `path`; None if absent."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        mk = parse_marker(lines[i])
        if mk and mk["pid"] == pid:
            return lines[i + 1 :]
    return None


# --- rotation ---------------------------------------------------------------------------------


def rotated_name(path: str, stamp: str, exists) -> str:
    """`vllm.log` -> `vllm.log.20261130-104800`, with `.1`, `.2` ... when that name is taken."""
    name = f"{path}.{stamp}"
    n = 1
    while exists(name):
        name = f"{path}.{stamp}.{n}"
        n += 1
    return name


def _rotation_pattern(base: str) -> re.Pattern:
    """`vllm.log.20261130-104800` and `vllm.log.20261130-104800.2`: the names rotated_name gives."""
    return re.compile(r"^" + re.escape(base) + r"\.(\d{8}-\d{6})(?:\.(\d+))?$")


def rotated_files(path: str) -> list:
    """Files named like rotated copies of `path`, oldest first (by the timestamp in the name, then the counter).

    A name is no proof: `owned_rotated_files` keeps only those that carry the start marker.
    """
    folder, base = os.path.split(os.path.abspath(path))
    pattern = _rotation_pattern(base)
    found = []
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        m = pattern.match(name)
        if m:
            found.append((m.group(1), int(m.group(2) or 0), os.path.join(folder, name)))
    return [p for _, _, p in sorted(found)]


def starts_with_marker(path: str) -> bool:
    """Whether `path` is a regular file (not a symlink) whose first line is the tool's start marker.

    Every log the tool creates starts with it (the process mode writes it before exec into a fresh
    file, the unit's bash before vLLM), and a rotated log is such a file renamed: this is the proof of
    ownership for rotating and pruning.
    """
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            return False
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            head = fh.read(len(MARKER_PREFIX) + 200)
    except OSError:
        return False
    return parse_marker(head.split(b"\n", 1)[0].decode("utf-8", "replace")) is not None


def owned_rotated_files(path: str) -> tuple:
    """(the tool's rotated copies of `path`, oldest first; look-alikes it did not write, left alone)."""
    ours: list = []
    foreign: list = []
    for p in rotated_files(path):
        (ours if starts_with_marker(p) else foreign).append(p)
    return ours, foreign


def prune_plan(rotated_oldest_first: list, keep: int, held_open: set) -> tuple:
    """(to delete, kept because open): the oldest beyond `keep`, except files a process holds open."""
    excess = rotated_oldest_first[: max(0, len(rotated_oldest_first) - keep)]
    delete = [p for p in excess if p not in held_open]
    kept = [p for p in excess if p in held_open]
    return delete, kept


def files_held_open(paths: list) -> set:
    """Which of `paths` some process has open (a /proc/*/fd scan; other users' fds may be unreadable)."""
    wanted = {}
    for p in paths:
        try:
            st = os.stat(p)
            wanted[(st.st_dev, st.st_ino)] = p
        except OSError:
            pass
    held: set = set()
    if not wanted or not os.path.isdir("/proc"):
        return held
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(os.path.join(fd_dir, fd))
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key in wanted:
                held.add(wanted[key])
    return held


def _is_unused_empty_file_of_ours(path: str) -> bool:
    """An empty regular file of this user that nobody holds open: it holds nothing to lose.

    (The tool leaves one only when it created the log and the fork failed before the marker.)
    """
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.geteuid() and not files_held_open([path])


def check_log(path: str, root: str | None = None) -> str:
    """The log's normalised path once rotating it is safe; else a ModuleError, with nothing changed.

    Safe: the path is one the tool may own (absolute, no `..`, not a system or home folder, inside
    dfp_root when given), and what lies there is absent, the tool's own log (start marker first), or
    an empty file of ours that nobody writes. Anything else is somebody else's file and stays as it is.
    """
    clean = managed_path(path, "vllm_log", root)
    if os.path.lexists(clean) and not starts_with_marker(clean) and not _is_unused_empty_file_of_ours(clean):
        raise ModuleError(
            f"vllm_log {clean} exists but was not written by dflash-provision (it does not start with the "
            f"tool's start marker '{MARKER_PREFIX} ...'); it was left untouched and nothing was started. "
            "Move that file away, or set vllm_log to a file of its own inside dfp_root",
            log=clean,
        )
    return clean


def rotate(path: str, keep: int, check: bool = False, root: str | None = None) -> dict:
    """Move the current log aside (never truncate or delete it) and prune the tool's old rotated copies.

    Only what is provably the tool's is touched: the live log once `check_log` accepts it, rotated
    copies only when named by the rotation pattern AND starting with the start marker. Look-alikes
    are listed in `foreign` and left alone.
    """
    path = check_log(path, root)
    result: dict = {"rotated_to": None, "removed": [], "kept_open": [], "foreign": []}
    if os.path.lexists(path):
        held = files_held_open([path])
        if os.path.getsize(path) > 0 or held:
            result["rotated_to"] = rotated_name(path, time.strftime("%Y%m%d-%H%M%S"), os.path.lexists)
            if not check:
                os.rename(path, result["rotated_to"])
        elif not check:
            os.unlink(path)  # empty, ours and nobody writes it
    rotated, result["foreign"] = owned_rotated_files(path)
    if check and result["rotated_to"]:
        rotated.append(result["rotated_to"])
    delete, kept = prune_plan(rotated, keep, files_held_open(rotated))
    for p in delete:
        if not check:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
    result["removed"], result["kept_open"] = delete, kept
    return result
