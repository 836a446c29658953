"""Ensure a line is in a text file (or replaces the line a regexp or a string finds), or that no such line is:
ansible.builtin.lineinfile's options, aliases, results and messages.

No role or playbook uses it: it is here for the benchmark's workload (bench/workload/ours.yaml, the same tasks as
Ansible's) and for playbooks written for Ansible.

It does what Ansible's does (tests/library/test_lineinfile_against_ansible.py runs both on copies of the same
files): the file is read as bytes, a regexp is searched in each line with its newline, a new or replaced line ends
in "\\n" (in a CRLF file too); msg is "line added", "line replaced", "N line(s) removed" or "" (nothing changed),
with " and ownership, perms or SE linux context changed" when mode, owner or group were fixed; `backup` is the
backup's path (Ansible's name, PATH.PID.YYYY-MM-DD@HH:MM:SS~) or ""; state=absent returns `found`. The file is
written through a temp file in its folder, validated there when `validate` is given, then renamed into place.

Where it differs on purpose: a line inserted after a regexp match on a last line without a newline gets a line
of its own (Ansible's is glued to that line); an option and its alias
given with different values are refused (Ansible warns and takes the alias's); a bad regexp or validate command
is a message, not a traceback, even when nothing would change; backrefs: false beside search_string is accepted;
the diff is one {before, after} with before_mode/after_mode (Ansible's list has a second entry for attributes).
Symbolic modes (u+rw) are refused; SELinux options, attributes and unsafe_writes are not arguments, so a task
using them is refused when the playbook is loaded.
"""

from __future__ import annotations

import io
import os
import re

from dflash_host.host.fileattrs import lookup_gid, lookup_uid, new_file_mode, octal_mode, set_attributes
from dflash_host.host.files import atomic_write, backup_name, read_bytes
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "path": {"type": "path", "default": None,
             "help": "the file on the host (required: path or one of its aliases); a symlink is followed"},
    "dest": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "destfile": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "name": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "state": {"type": "str", "default": "present", "choices": ["present", "absent"],
              "help": "present: the line is there; absent: no line matching regexp, search_string or line is"},
    "regexp": {"type": "str", "default": None,
               "help": "Python regex searched in each line (its newline included): present replaces the last "
                       "matching line (the first with firstmatch), absent removes every match"},
    "regex": {"type": "str", "default": None, "alias_of": "regexp", "help": "alias of regexp"},
    "search_string": {"type": "str", "default": None,
                      "help": "a literal string instead of regexp: the lines holding it are the matches"},
    "line": {"type": "str", "default": None,
             "help": "the whole line (without newline); required with state present; with backrefs, \\1 and "
                     "\\g<name> take the regexp's groups"},
    "value": {"type": "str", "default": None, "alias_of": "line", "help": "alias of line"},
    "backrefs": {"type": "bool", "default": False,
                 "help": "line is the regexp match's expansion; no match changes nothing (insertafter/insertbefore "
                         "are not used)"},
    "insertafter": {"type": "str", "default": None,
                    "help": "where a new line goes when nothing matches: EOF (the default), BOF, or after the last "
                            "line this regex matches (the first with firstmatch; EOF when none does)"},
    "insertbefore": {"type": "str", "default": None,
                     "help": "instead of insertafter: BOF, or before the last line this regex matches (the first "
                             "with firstmatch; EOF when none does)"},
    "create": {"type": "bool", "default": False,
               "help": "create the file (and its missing folders, 0755) when it does not exist"},
    "backup": {"type": "bool", "default": False,
               "help": "keep a copy of the file as it was (PATH.PID.YYYY-MM-DD@HH:MM:SS~) when it changes"},
    "firstmatch": {"type": "bool", "default": False,
                   "help": "regexp, search_string, insertafter and insertbefore take the first matching line, "
                           "not the last"},
    "validate": {"type": "str", "default": None,
                 "help": "a command run on the new content (%s: its temp file) before it replaces the file, "
                         "without a shell; a non-zero exit fails the task and leaves the file as it was"},
    "mode": {"help": 'octal string such as "0644" (or the number YAML makes of 0644); none: the file keeps its '
                     "mode, a new one gets 0666 less the umask"},  # the file attributes' mode, octal only here
    "_groups": ("file_attributes",),  # mode (above), owner, group: dflash_host/shared_args.py
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("path", "dest", "destfile", "name", "validate")

ATTRIBUTES_CHANGED = "ownership, perms or SE linux context changed"
EXCLUSIVE = (("insertbefore", "insertafter"), ("regexp", "search_string"), ("backrefs", "search_string"))
EMPTY_PATTERN = ("The {} is an empty string, which will match every line in the file. This may have unintended "
                 "consequences, such as replacing the last line in the file rather than appending.")


def _compile(name: str, pattern: str) -> re.Pattern:
    try:
        return re.compile(pattern.encode("utf-8", errors="surrogateescape"))
    except re.error as exc:
        raise ModuleError(f"module 'lineinfile': {name} {pattern!r} is not a valid regex: {exc}; fix the pattern") from None


def _ends_a_line(lines: list) -> bool:
    return bool(lines) and lines[-1][-1:] in (b"\n", b"\r")


def _last(lines: list, hit, first: bool) -> tuple[int, object]:
    """(index, what hit returned) of the last line hit(line) is true for, or of the first when `first`."""
    found: tuple[int, object] = (-1, None)
    for i, cur in enumerate(lines):
        got = hit(cur)
        if got:
            found = (i, got)
            if first:
                break
    return found


def present(lines: list, line: bytes, rx: re.Pattern | None, search: bytes | None, after: str | None,
            before: str | None, firstmatch: bool = False, backrefs: bool = False) -> tuple[list, str]:
    """Ansible's state=present on the file's lines (bytes, each with its newline): (new lines, msg; "" when
    nothing changes). Pure: no I/O."""
    lines = list(lines)
    if after is None and before is None:
        after = "EOF"
    at, match = -1, None
    if rx is not None:
        at, match = _last(lines, rx.search, firstmatch)
    elif search is not None:
        at, match = _last(lines, lambda cur: search in cur, firstmatch)
    mark = -1  # where a new line goes when insertafter/insertbefore is a regex and matches
    if not match:
        where = after if after not in (None, "BOF", "EOF") else before if before not in (None, "BOF") else None
        marker = None if where is None else _compile("insertafter" if where == after else "insertbefore", where)
        for i, cur in enumerate(lines):  # the exact line anywhere; the marker's last (or first) line
            if cur.rstrip(b"\r\n") == line:
                at = i
            elif marker is not None and marker.search(cur) and (after or before):
                mark = i + 1 if after else i
                if firstmatch:
                    break
    if at != -1:  # a line matched (regexp, search_string) or the exact line is there: it becomes the line
        new = match.expand(line) if backrefs and isinstance(match, re.Match) else line
        new = new if new.endswith(b"\n") else new + b"\n"
        if lines[at] == new:
            return lines, ""
        lines[at] = new
        return lines, "line replaced"
    if backrefs:  # no match to fill the groups from: nothing is safe to write
        return lines, ""
    if "BOF" in (after, before):
        return [line + b"\n", *lines], "line added"
    if after == "EOF" or mark == -1:
        return [*lines, *([] if not lines or _ends_a_line(lines) else [b"\n"]), line + b"\n"], "line added"
    if after and mark == len(lines):  # after the last line: a line of its own (Ansible's joins it to that line)
        if lines[-1].rstrip(b"\r\n") == line:
            return lines, ""
        return [*lines, *([] if _ends_a_line(lines) else [b"\n"]), line + b"\n"], "line added"
    if after and lines[mark].rstrip(b"\r\n") == line:
        return lines, ""
    return [*lines[:mark], line + b"\n", *lines[mark:]], "line added"


def absent(lines: list, line: bytes | None, rx: re.Pattern | None, search: bytes | None) -> tuple[list, int]:
    """Ansible's state=absent: (the lines kept, how many were removed). Pure: no I/O."""
    if rx is not None:
        gone = [bool(rx.search(cur)) for cur in lines]
    elif search is not None:
        gone = [search in cur for cur in lines]
    else:
        gone = [cur.rstrip(b"\r\n") == line for cur in lines]
    return [cur for cur, g in zip(lines, gone) if not g], sum(gone)


def _mode(value) -> int | None:
    """Ansible's mode: a number as it is (YAML makes one of an unquoted 0644), a string in octal."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 0o7777:
            raise ModuleError(f"module 'lineinfile': mode {value} is out of range 0000-7777; quote it, e.g. mode: \"0644\"")
        return value
    if value is not None and not isinstance(value, str):
        raise ModuleError(f"module 'lineinfile': mode must be an octal string such as \"0644\", got {value!r}")
    try:
        return octal_mode(value)
    except ModuleError as exc:
        raise ModuleError(f"module 'lineinfile': {exc.msg} (symbolic modes such as u+rw are not taken)") from None


def check(args: dict, ctx: Context) -> dict:
    """The combinations Ansible refuses, refused with its words and the fix; the warnings it gives."""
    if args["path"] is None:
        raise ModuleError("missing required arguments: path; give path (or its alias dest, destfile or name): "
                          "the file to edit")
    both = [f"{a}|{b}" for a, b in EXCLUSIVE if args[a] not in (None, False) and args[b] is not None]
    if both:
        raise ModuleError(f"parameters are mutually exclusive: {', '.join(both)}; keep one of each pair")
    if args["regexp"] == "":
        ctx.warn(EMPTY_PATTERN.format("regular expression") + " If this is desired, use '^' to match every line in "
                 "the file and avoid this warning.")
    elif args["search_string"] == "":
        ctx.warn(EMPTY_PATTERN.format("search string"))
    if args["state"] == "present":
        if args["backrefs"] and args["regexp"] is None:
            raise ModuleError("regexp is required with backrefs=true: the line is filled from its groups; add a "
                              "regexp or set backrefs: false")
        if args["line"] is None:
            raise ModuleError("line is required with state=present: give the whole line wanted")
    elif (args["regexp"], args["search_string"], args["line"]) == (None, None, None):
        raise ModuleError("one of line, search_string, or regexp is required with state=absent: say which lines "
                          "to remove")
    validate = args["validate"]
    if validate is not None and "%s" not in validate:
        raise ModuleError(f"validate must contain %s: {validate}; write %s where the file to check goes")
    for name in ("insertafter", "insertbefore"):  # present() compiles them only when nothing matched: refused here
        if args["state"] == "present" and args[name] not in (None, "BOF", "EOF"):
            _compile(name, args[name])
    return {
        "rx": None if args["regexp"] is None else _compile("regexp", args["regexp"]),
        "search": None if args["search_string"] is None else args["search_string"].encode("utf-8", "surrogateescape"),
        "line": None if args["line"] is None else args["line"].encode("utf-8", "surrogateescape"),
        "mode": _mode(args["mode"]),
        "uid": lookup_uid(args["owner"], ansible_words=False),
        "gid": lookup_gid(args["group"], ansible_words=False),
    }


def _found_attributes(real: str, exists: bool) -> tuple[int, int, int]:
    """(mode, uid, gid) of the file, or those a file created there now gets."""
    if exists:
        st = os.stat(real)
        return st.st_mode & 0o7777, st.st_uid, st.st_gid
    folder = os.path.dirname(real)
    while not os.path.isdir(folder):
        folder = os.path.dirname(folder)
    st = os.stat(folder)
    return new_file_mode(), os.geteuid(), st.st_gid if st.st_mode & 0o2000 else os.getegid()


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _lines(raw: bytes | None) -> list:
    """The file's lines as Python's readlines gives them (split after each \n only, a lone \r stays inside)."""
    return [] if raw is None else io.BytesIO(raw).readlines()


def _write(path: str, real: str, raw: bytes | None, data: bytes, c: dict, args: dict, new_mode: int) -> str:
    """The new content in place (atomically; validated, backed up if asked): the backup's path or ""."""
    if raw is None:
        os.makedirs(os.path.dirname(real), mode=0o755, exist_ok=True)
    keep = None if raw is not None else new_mode  # a replaced file keeps its mode, a new one gets 0666 less the umask
    mode = c["mode"] if c["mode"] is not None else keep
    backup = backup_name(os.path.abspath(path), "ansible") if args["backup"] and raw is not None else False
    return atomic_write(real, data, mode, backup, args["validate"]) or ""


def run(args: dict, ctx: Context) -> dict:
    c = check(args, ctx)
    path = os.path.expandvars(args["path"])  # Ansible's path type expands $VARS too
    if os.path.isdir(path):
        raise ModuleError(f"Path {path} is a directory ! Give the file's path", rc=256)
    real = os.path.realpath(path)
    try:
        raw = read_bytes(real)
    except OSError as exc:
        raise ModuleError(f"module 'lineinfile': cannot read {path}: {exc.strerror}; fix its permissions") from None
    if args["state"] == "absent":
        if raw is None:
            return {"changed": False, "msg": "file not present"}
        new, found = absent(_lines(raw), c["line"], c["rx"], c["search"])
        msg, extra = (f"{found} line(s) removed" if found else ""), {"found": found}
    else:
        if raw is None and not args["create"]:
            raise ModuleError(f"Destination {path} does not exist ! Set create: true to create it, or fix path",
                              rc=257)
        new, msg = present(_lines(raw), c["line"], c["rx"], c["search"], args["insertafter"], args["insertbefore"],
                           args["firstmatch"], args["backrefs"])
        extra = {}
    data, changed = b"".join(new), bool(msg)
    result = {"changed": changed, "msg": msg, "backup": "", **extra}
    if ctx.diff:
        result["diff"] = {"before": "" if raw is None else _text(raw), "after": _text(data),
                          "before_header": f"{path} (content)", "after_header": f"{path} (content)"}
    if raw is None and (ctx.check or not changed):  # Ansible's early answer: no file yet, no attributes to compare
        return result
    mode, uid, gid = _found_attributes(real, raw is not None)
    fix = (c["mode"] is not None and c["mode"] != mode) or (c["uid"] is not None and c["uid"] != uid) or (
        c["gid"] is not None and c["gid"] != gid)
    if fix:
        result.update(changed=True, msg=f"{msg} and {ATTRIBUTES_CHANGED}" if msg else ATTRIBUTES_CHANGED)
        if ctx.diff and c["mode"] is not None and c["mode"] != mode:
            result["diff"].update(before_mode=f"{mode:04o}", after_mode=f"{c['mode']:04o}")
    if ctx.check:
        return result
    try:
        if changed:
            result["backup"] = _write(path, real, raw, data, c, args, mode)
        if fix:
            set_attributes(real, c["mode"], c["uid"], c["gid"], False)
    except OSError as exc:
        raise ModuleError(f"module 'lineinfile': cannot write {path} or set its mode or owner: {exc.strerror}; fix "
                          "the permissions of the file or its folder (an owner needs root)") from None
    return result


if __name__ == "__main__":
    main(ARGS, run)
