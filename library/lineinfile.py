"""Ensure one line is in a text file (or replaces the line a regex finds), or that no such line is.

No role or playbook uses it: it is here for the benchmark's workload (bench/workload/ours.yaml, the
same tasks as Ansible's) and for user playbooks.

For the one setting in a file someone else owns: an environment line, a config key. The rest of the
file is kept byte for byte; the new file is written atomically, with a backup if asked.

With regexp and state present, when no line matches but the exact line is already there, nothing
changes (so a regexp that does not match the line itself stays idempotent).
"""

from __future__ import annotations

import os
import re

from dflash_host.host.files import atomic_write, parse_mode, read_bytes
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "path": {"type": "path", "required": True, "help": "the file on the host; a symlink is followed"},
    "line": {
        "type": "str",
        "default": None,
        "help": "the whole line wanted (without newline); required with state present",
    },
    "regexp": {
        "type": "str",
        "default": None,
        "help": "Python regex: present replaces the last matching line; absent removes every match",
    },
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"], "help": "present or absent"},
    "create": {
        "type": "bool",
        "default": False,
        "help": "create the file (and its missing folders, 0755) when it does not exist",
    },
    "insertafter": {
        "type": "str",
        "default": "EOF",
        "help": "where a new line goes: EOF, or after the last line matching this regex (EOF if none)",
    },
    "mode": {"type": "str", "default": None, "help": 'octal string such as "0644" for the file'},
    "backup": {"type": "bool", "default": False, "help": "keep a timestamped copy of the file before changing it"},
}


def _compile(name: str, pattern: str | None) -> re.Pattern | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ModuleError(f"module 'lineinfile': {name} {pattern!r} is not a valid regex: {exc}; fix the pattern")


def _bare(line: str) -> str:
    return line.rstrip("\r\n")


def edit(text: str, line: str | None, regexp: str | None, state: str, insertafter: str = "EOF") -> tuple[str, str | None]:
    """The file's new text and what was done (None when nothing changes). Pure: no I/O."""
    rx = _compile("regexp", regexp)
    lines = text.splitlines(keepends=True)
    nl = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    if state == "absent":
        keep = [ln for ln in lines if not (rx.search(_bare(ln)) if rx else _bare(ln) == line)]
        removed = len(lines) - len(keep)
        return ("".join(keep), f"removed {removed} line(s)") if removed else (text, None)

    if rx is not None:
        hits = [i for i, ln in enumerate(lines) if rx.search(_bare(ln))]
        if hits:
            i = hits[-1]
            if _bare(lines[i]) == line:
                return text, None
            ending = lines[i][len(_bare(lines[i])) :]
            lines[i] = line + ending
            return "".join(lines), "replaced a line"
    if any(_bare(ln) == line for ln in lines):
        return text, None
    at = len(lines)
    if insertafter != "EOF":
        after = _compile("insertafter", insertafter)
        marks = [i for i, ln in enumerate(lines) if after.search(_bare(ln))]
        if marks:
            at = marks[-1] + 1
    if at > 0 and not lines[at - 1].endswith("\n"):
        lines[at - 1] += nl
    lines.insert(at, line + nl)
    return "".join(lines), "added a line"


def run(args: dict, ctx: Context) -> dict:
    state, line, regexp = args["state"], args["line"], args["regexp"]
    if state == "present" and line is None:
        raise ModuleError("module 'lineinfile': state present needs 'line' (the whole line wanted)")
    if state == "absent" and line is None and regexp is None:
        raise ModuleError("module 'lineinfile': state absent needs 'line' or 'regexp' to know which lines to remove")
    if line is not None and ("\n" in line or "\r" in line):
        raise ModuleError("module 'lineinfile': 'line' contains a newline; it manages one line (use copy or template for more)")
    _compile("regexp", regexp)
    if args["insertafter"] != "EOF":
        _compile("insertafter", args["insertafter"])
    mode = parse_mode(args["mode"])
    path = os.path.realpath(args["path"])
    if os.path.isdir(path):
        raise ModuleError(f"module 'lineinfile': {args['path']} is a directory; give a file")
    try:
        raw = read_bytes(path)
    except OSError as exc:
        raise ModuleError(f"module 'lineinfile': cannot read {path}: {exc.strerror}; fix its permissions")
    if raw is None:
        if state == "absent":
            return {"changed": False, "msg": f"{path} does not exist: nothing to remove", "path": path}
        if not args["create"] and ctx.check:
            # an earlier task of the play (not run in check mode) may be the one that creates it
            ctx.warn(f"{path} does not exist; a real run fails here unless an earlier task creates it")
            return {"changed": True, "path": path, "msg": f"check mode: {path} does not exist yet; would add the line"}
        if not args["create"]:
            raise ModuleError(f"module 'lineinfile': {path} does not exist; set create: true to create it, or fix 'path'")
    before = "" if raw is None else raw.decode("utf-8", errors="surrogateescape")
    after, what = edit(before, line, regexp, state, args["insertafter"])
    if raw is None:
        what = "created the file with the line"
    cur_mode = None if raw is None else os.stat(path).st_mode & 0o7777
    mode_differs = mode is not None and cur_mode is not None and cur_mode != mode
    if what is None and not mode_differs:
        return {"changed": False, "msg": f"{path}: the line is as wanted", "path": path}
    what = what or f"set mode {mode:04o}"
    result = {
        "changed": True,
        "path": path,
        "msg": f"{'check mode: would have ' if ctx.check else ''}{what} in {path}",
    }
    if ctx.diff:
        result["diff"] = {
            "before": None if raw is None else before,
            "after": after,
        }
        if mode_differs:
            result["diff"]["before_mode"], result["diff"]["after_mode"] = f"{cur_mode:04o}", f"{mode:04o}"
    if ctx.check:
        return result
    try:
        if raw is None:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        if after != before or raw is None:
            backup_file = atomic_write(
                path,
                after.encode("utf-8", errors="surrogateescape"),
                mode if mode is not None else cur_mode,
                args["backup"],
            )
            if backup_file:
                result["backup_file"] = backup_file
        elif mode_differs:
            os.chmod(path, mode)
    except OSError as exc:
        raise ModuleError(
            f"module 'lineinfile': cannot write {path}: {exc.strerror}; fix the permissions of the file or its folder"
        )
    return result


if __name__ == "__main__":
    main(ARGS, run)
