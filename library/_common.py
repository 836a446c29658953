"""Shared helpers for task modules: the module contract, argument checking, file attributes, atomic writes.

Every module in library/ imports from here. The worker ships this file to the host with the
module, and `python3 library/NAME.py ARGS.json` finds it beside the module, so both paths run the
same code. Only the standard library is imported here: a host needs nothing but python3 (3.9+).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: typing, dataclasses, tempfile and shutil cost ~10 ms per host per run
    from typing import Any, Callable


class ModuleError(Exception):
    """A failure a person can act on: what is wrong, where, and the fix. Never a traceback."""

    def __init__(self, msg: str, **data: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.data = data


class Context:
    """What a module knows about the run besides its arguments."""

    def __init__(self, check: bool = False, diff: bool = False, warnings: list | None = None,
                 progress: Callable[[str], None] | None = None) -> None:
        self.check = check  # report what would change, change nothing
        self.diff = diff  # include before/after in the result
        self.warnings = [] if warnings is None else warnings
        self.progress = progress  # live progress for long steps

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


_TYPES = {
    "str": (str,),
    "path": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "list": (list, tuple),
    "dict": (dict,),
    "raw": (object,),
}

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _coerce(name: str, value: Any, typ: str, module: str) -> Any:
    """Accept the forms YAML and `-e key=value` produce (strings for numbers and booleans)."""
    if value is None:
        return None
    if typ == "bool" and isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    if typ == "int" and isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    if typ == "float" and isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    if typ == "list" and isinstance(value, str):
        return [value]
    if typ in ("str", "path") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    ok = _TYPES[typ]
    if typ in ("int", "float") and isinstance(value, bool):
        ok = ()
    if not isinstance(value, ok):
        raise ModuleError(
            f"module '{module}': argument '{name}' must be {typ}, got {type(value).__name__} "
            f"{value!r}; fix the value in the task's arguments"
        )
    if typ == "path":
        value = os.path.expanduser(value)
    return value


def check_args(spec: dict, args: dict, module: str) -> dict:
    """Validate args against a module's ARGS spec; return them with defaults filled in."""
    unknown = sorted(set(args) - set(spec))
    if unknown:
        raise ModuleError(f"module '{module}': unknown argument(s) {', '.join(unknown)}; it accepts: {', '.join(sorted(spec))}")
    out = {}
    for name, opts in spec.items():
        if name in args and args[name] is not None:
            value = _coerce(name, args[name], opts.get("type", "str"), module)
        elif opts.get("required"):
            raise ModuleError(f"module '{module}': missing required argument '{name}'")
        else:
            value = opts.get("default")
        choices = opts.get("choices")
        if choices is not None and value is not None and value not in choices:
            raise ModuleError(f"module '{module}': argument '{name}' is {value!r}; choose one of: {', '.join(map(str, choices))}")
        out[name] = value
    return out


def parse_mode(mode: str | None) -> int | None:
    if mode is None:
        return None
    try:
        value = int(str(mode), 8)
    except ValueError:
        raise ModuleError(f'mode {mode!r} is not an octal number; write it quoted, e.g. mode: "0750"')
    if not 0 <= value <= 0o7777:
        raise ModuleError(f"mode {mode!r} is out of range 0000-7777")
    return value


def resolve_uid(owner: str | None) -> int | None:
    if owner is None:
        return None
    if str(owner).isdigit():
        return int(owner)
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise ModuleError(f"owner {owner!r} does not exist on this host; create the user or fix 'owner'")


def resolve_gid(group: str | None) -> int | None:
    if group is None:
        return None
    if str(group).isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ModuleError(f"group {group!r} does not exist on this host; create it or fix 'group'")


def ensure_attributes(path: str, mode: int | None, uid: int | None, gid: int | None, check: bool) -> bool:
    """Set ownership, then mode, where they differ; return whether anything differed.

    Owner first: the kernel clears setuid/setgid bits on chown, so a chmod before it would not stick.
    """
    st = os.stat(path)
    changed = False
    if (uid is not None and st.st_uid != uid) or (gid is not None and st.st_gid != gid):
        changed = True
        if not check:
            os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
    if mode is not None and (os.stat(path).st_mode & 0o7777 if not check else st.st_mode & 0o7777) != mode:
        changed = True
        if not check:
            os.chmod(path, mode)
    return changed


def _write_failed(path: str, exc: OSError, size: int) -> ModuleError:
    """atomic_write's one-paragraph error: what failed, that nothing changed, and the fix."""
    import errno

    folder = os.path.dirname(path)
    why = (exc.strerror or str(exc)).lower()
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        try:
            st = os.statvfs(folder)
            free = f"{st.f_bavail * st.f_frsize} bytes free"
        except OSError:
            free = "free space unknown"
        fix = (
            f"there is not enough space on the filesystem of {folder} ({free}, {size} needed); free space there "
            "or point the path elsewhere"
        )
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        fix = f"fix the permissions of {folder} (or remount it writable), or point the path elsewhere"
    else:
        fix = f"check {folder} and the disk it lies on"
    return ModuleError(
        f"cannot write {path}: {why}; the file is unchanged and no temporary file was left. {fix[0].upper()}{fix[1:]}, "
        "then run again",
        path=path,
        errno=exc.errno,
    )


def atomic_write(path: str, data: bytes, mode: int | None = None, backup: bool = False) -> str | None:
    """Write through a temp file in the same folder, fsync, rename. Return the backup path if made.

    A reader never sees a half-written file, and a crash leaves the old one in place. A replaced
    file keeps its mode (unless `mode` is given) and, when root writes it, its owner and group.
    When the write fails (a full disk, permissions) the old file stays as it was, the temp file and a
    backup made for this write are removed, and the error is a ModuleError naming the path and the fix.
    """
    import shutil
    import tempfile
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    backup_path = tmp = None
    try:
        if backup and os.path.exists(path):
            backup_path = f"{path}.{time.strftime('%Y%m%d-%H%M%S')}.bak"
            n = 1
            while os.path.exists(backup_path):
                backup_path = f"{path}.{time.strftime('%Y%m%d-%H%M%S')}.{n}.bak"
                n += 1
            shutil.copy2(path, backup_path)
        before = os.stat(path) if os.path.exists(path) else None
        if mode is None and before is not None:
            mode = before.st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if before is not None and os.geteuid() == 0:
            # the rename makes a new inode owned by us: give it the old owner (before chmod, which
            # chown would undo for setuid/setgid bits)
            os.chown(tmp, before.st_uid, before.st_gid)
        os.chmod(tmp, 0o644 if mode is None else mode)
        os.replace(tmp, path)
    except BaseException as exc:
        for leftover in (tmp, backup_path):
            if leftover and os.path.lexists(leftover):
                try:
                    os.unlink(leftover)
                except OSError:
                    pass
        if isinstance(exc, OSError):
            raise _write_failed(path, exc, len(data)) from None
        raise
    return backup_path


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def text_diff(before: Any, after: Any) -> dict:
    return {"before": before, "after": after}


def execute(spec: dict, run: Callable, args: dict, ctx: Context, module: str) -> dict:
    """Run one module call under the contract: validated args in, a result dict out."""
    try:
        checked = check_args(spec, args, module)
        result = run(checked, ctx) or {}
    except ModuleError as exc:
        result = dict(exc.data)
        result.update(failed=True, changed=False, msg=exc.msg)
    result.setdefault("changed", False)
    result.setdefault("failed", False)
    result.setdefault("msg", "")
    if ctx.warnings:
        result["warnings"] = list(ctx.warnings) + list(result.get("warnings", []))
    return result


def main(spec: dict, run: Callable) -> None:
    """Entry point for `python3 library/NAME.py ARGS.json [--check] [--diff]`: prints the JSON result."""
    module = os.path.splitext(os.path.basename(sys.argv[0]))[0]
    argv = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    if len(argv) != 1:
        print(f"usage: python3 library/{module}.py ARGS.json [--check] [--diff]", file=sys.stderr)
        sys.exit(2)
    try:
        with open(argv[0], encoding="utf-8") as fh:
            args = json.load(fh)
    except (OSError, ValueError) as exc:
        print(json.dumps({"failed": True, "changed": False, "msg": f"{argv[0]}: cannot read args: {exc}"}))
        sys.exit(1)
    ctx = Context(check="--check" in flags, diff="--diff" in flags)
    result = execute(spec, run, args, ctx, module)
    print(json.dumps(result, indent=2, sort_keys=True, default=str))
    sys.exit(1 if result.get("failed") else 0)
