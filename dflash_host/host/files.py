"""Files on the host: atomic writes, backups, validate, reads (what modules that write files share). A path's mode
and owner are set and read by dflash_host/host/fileattrs.py only.

JSON on the host is read one of two ways, by who wrote the file:
- read_json: a record this tool wrote itself (an environment's marker, the build journal, a launch record);
  None when it is missing, unreadable, not JSON or not an object: the caller reads that as "not ours".
- a file nobody on the host vouches for (a checkpoint's header, a model's config.json) is read bounded in size
  and nesting by dflash_host/host/untrusted_json.py (load_json_file raises saying what is wrong);
  dflash_host.models.config.read_config_json turns that into a ModuleError naming the file and the fix.

Standard library only; errors are ModuleErrors naming the path and the fix.
"""

from __future__ import annotations

import json
import os
import time

from dflash_host.module import ModuleError

TYPE_CHECKING = False  # true for mypy; typing is never imported on the host (as in dflash_host/module.py)
if TYPE_CHECKING:  # annotations only
    from typing import Any


def write_failed(path: str, exc: OSError, size: int) -> ModuleError:
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


def backup_name(path: str, style: str = "dfp") -> str:
    """A name no file has yet for a backup of `path`: the tool's PATH.YYYYmmdd-HHMMSS.bak, or (style "ansible",
    for the modules named as Ansible's) module_utils' backup_local name PATH.PID.YYYY-MM-DD@HH:MM:SS~. A name
    taken already (one worker runs many tasks in a second) gets a counter: PATH.YYYYmmdd-HHMMSS.N.bak,
    PATH.PID.YYYY-MM-DD@HH:MM:SS.N~."""
    if style == "ansible":
        stamp, end = f"{os.getpid()}.{time.strftime('%Y-%m-%d@%H:%M:%S')}", "~"
    else:
        stamp, end = time.strftime("%Y%m%d-%H%M%S"), ".bak"
    name, n = f"{path}.{stamp}{end}", 1
    while os.path.lexists(name):
        name, n = f"{path}.{stamp}.{n}{end}", n + 1
    return name


def run_validate(command: str, path: str) -> None:
    """Ansible's `validate`: COMMAND with %s replaced by `path` (quoted where it needs it), split as a shell would
    but run without one, each word's ~ and $VARS expanded (module_utils' run_command); a non-zero exit is a
    ModuleError with Ansible's words, the command's stderr in them."""
    import shlex
    import subprocess

    try:
        argv = [os.path.expanduser(os.path.expandvars(w)) for w in shlex.split(command % shlex.quote(path))]
    except (TypeError, ValueError) as exc:
        raise ModuleError(f"validate {command!r} cannot be used: {exc}; write one %s where the file goes "
                          "(and %% for a percent sign)") from None
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
    except OSError as exc:
        raise ModuleError(f"failed to validate: cannot run {argv[0] if argv else command!r}: {exc.strerror or exc}; "
                          "install it or fix the validate command") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", errors="replace").strip()
        raise ModuleError(f"failed to validate: rc:{proc.returncode} error:{err} (the file is unchanged: fix the "
                          "content or the validate command)", exit_status=proc.returncode,
                          stdout=proc.stdout.decode("utf-8", errors="replace"), stderr=err)


def _keep_owner(original: str, copy: str) -> None:
    """A backup keeps the old file's owner and group, as Ansible's preserved copy (where this user may set them)."""
    st = os.stat(original)
    try:
        os.chown(copy, st.st_uid, st.st_gid)
    except PermissionError:
        pass


def atomic_write(path: str, data: bytes | None, mode: int | None = None, backup: bool | str = False,
                 validate: str | None = None, suffix: str = "", source: str | None = None) -> str | None:
    """Write through a temp file in the same folder, fsync, rename. Return the backup path if made.

    A reader never sees a half-written file, and a crash leaves the old one in place. A replaced
    file keeps its mode (unless `mode` is given) and, when root writes it, its owner and group.
    `backup`: True names the copy of the old file backup_name(path); a string is the copy's path (a module
    named as Ansible's names it after the path it was given, a symlink's too). `validate` (Ansible's: a command
    with %s) is run on the temp file before the rename, which happens only when it exits 0 (run_validate).
    When the write fails (a full disk, permissions, validate) the old file stays as it was, the temp file and a
    backup made for this write are removed, and the error is a ModuleError naming the path and the fix.
    `suffix` ends the temp file's name (the file's extension, for a validate command that reads it); `source`
    (data None) is a file whose bytes are copied in, read in chunks.
    """
    import shutil
    import tempfile
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    backup_path = tmp = None
    try:
        if backup and os.path.exists(path):
            backup_path = backup if isinstance(backup, str) else backup_name(path)
            shutil.copy2(path, backup_path)
            _keep_owner(path, backup_path)
        before = os.stat(path) if os.path.exists(path) else None
        if mode is None and before is not None:
            mode = before.st_mode & 0o7777
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
        with os.fdopen(fd, "wb") as fh:
            if source is not None:
                with open(source, "rb") as src:
                    shutil.copyfileobj(src, fh, 1 << 20)
            else:
                fh.write(data or b"")
            fh.flush()
            os.fsync(fh.fileno())
        if validate is not None:
            run_validate(validate, tmp)
        if before is not None and os.geteuid() == 0:
            # the rename makes a new inode owned by us: give it the old owner (before chmod, which
            # chown would undo for setuid/setgid bits)
            os.chown(tmp, before.st_uid, before.st_gid)
        if before is not None:
            copy_xattrs(path, tmp)
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
            raise write_failed(path, exc, len(data) if data is not None else _size(source)) from None
        raise
    return backup_path


def copy_xattrs(src: str, dst: str) -> None:
    """The old file's extended attributes (its POSIX ACLs among them) onto the new one, as Ansible's atomic_move
    keeps them; one this user may not set, or a filesystem without them, is left out."""
    try:
        names = os.listxattr(src)
    except OSError:
        return
    for name in names:
        try:
            os.setxattr(dst, name, os.getxattr(src, name))
        except OSError:
            continue


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def load_json(path: str) -> Any:
    """The JSON at `path`, a file the tool wrote itself; FileNotFoundError, OSError or ValueError (not UTF-8,
    not JSON) say why there is none. The one reader of the tool's records (the pidfile's reader wants the why)."""
    with open(path, "rb") as fh:
        raw = fh.read()
    return json.loads(raw.decode("utf-8"))


def read_json(path: str) -> dict | None:
    """A JSON object the tool wrote itself at `path`, or None when there is none to trust (missing,
    unreadable, not JSON, not an object): markers and records are proven the tool's by their content."""
    try:
        data = load_json(path)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None

