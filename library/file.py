"""Ensure a path is a directory, a file's mode/owner, or absent.

The building block of every role's layout: folders for environments, logs and configs, with the
mode and owner the service needs. Only what differs is changed, and only what can be the tool's:

- absent refuses `/`, top-level, system and home folders (and the folders holding the home),
  relative paths and paths with `..` (dflash_host/host/paths.py), before anything is looked at;
- a folder that exists keeps its mode and owner unless the task names one; the mode or owner of a
  system or home folder is never changed;
- folders it creates get 0755 (less what the umask takes away), parents included; `mode` sets the
  last one exactly.
"""

from __future__ import annotations

import os

from dflash_host.host.files import ensure_attributes, parse_mode, resolve_gid, resolve_uid
from dflash_host.host.paths import check_plain, managed_path
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "path": {"type": "path", "required": True, "help": "the path on the host (absolute, or starting with ~/)"},
    "state": {
        "type": "str",
        "default": "directory",
        "choices": ["directory", "file", "absent"],
        "help": "directory, file (must exist; only mode/owner managed), absent",
    },
    "mode": {
        "type": "str",
        "default": None,
        "help": 'octal string such as "0750"; none: an existing path keeps its mode',
    },
    "owner": {"type": "str", "default": None, "help": "user name or uid"},
    "group": {"type": "str", "default": None, "help": "group name or gid"},
    "recurse": {"type": "bool", "default": False, "help": "with state=absent, remove a non-empty directory too"},
}


def describe(path: str) -> dict:
    """The state of a path as the diff shows it."""
    if not os.path.lexists(path):
        return {"state": "absent"}
    st = os.lstat(path)
    kind = "directory" if os.path.isdir(path) else "file"
    return {"state": kind, "mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "gid": st.st_gid}


NEW_DIR_MODE = 0o755  # folders the tool creates: the server and the ssh user read them; secrets sit in 0600 files


def remove(path: str, recurse: bool, ctx: Context) -> dict:
    """state=absent, once managed_path has accepted the path: a symlink goes, never what it points at."""
    path = managed_path(path, "path")
    before = describe(path)
    if before["state"] == "absent":
        return {"changed": False, "msg": f"{path} is already absent", "path": path}
    is_dir = before["state"] == "directory" and not os.path.islink(path)
    if is_dir and os.listdir(path) and not recurse:
        raise ModuleError(f"{path} is a non-empty directory; set recurse: true to remove it with its contents")
    if not ctx.check:
        if is_dir:
            import shutil  # here: its import (bz2, lzma, fnmatch) costs every run on every host

            shutil.rmtree(path)
        else:
            os.unlink(path)
    return {"changed": True, "msg": f"removed {path}", "path": path, "diff": {"before": before, "after": {"state": "absent"}}}


def make_dirs(path: str, mode: int | None) -> list:
    """Create `path` and its missing parents (NEW_DIR_MODE, umask applies); `mode` sets the last one exactly.

    Only the folders created here are touched: an existing parent keeps its mode.
    """
    missing = []
    at = path
    while not os.path.lexists(at):
        missing.append(at)
        at = os.path.dirname(at)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, NEW_DIR_MODE)
        except FileExistsError:
            pass  # made meanwhile by someone else: theirs, left as it is
        except OSError as exc:
            raise ModuleError(f"cannot create the folder {folder}: {exc.strerror}; fix the parent folder or choose another path")
    if mode is not None and missing:
        os.chmod(path, mode)  # mkdir's mode is masked by the umask
    return list(reversed(missing))


def guard_attributes(path: str, mode: int | None, uid: int | None, gid: int | None) -> None:
    """Refuse to change the mode or owner of a path the tool cannot own (e.g. dfp_root=/tmp with a mode)."""
    if (mode, uid, gid) != (None, None, None) and ensure_attributes(path, mode, uid, gid, check=True):
        managed_path(path, "path")


def run(args: dict, ctx: Context) -> dict:
    state = args["state"]
    mode = parse_mode(args["mode"])
    uid, gid = resolve_uid(args["owner"]), resolve_gid(args["group"])
    if state == "absent":
        return remove(args["path"], args["recurse"], ctx)
    path = check_plain(args["path"], "path")
    before = describe(path)

    if state == "file":
        if before["state"] != "file":
            raise ModuleError(
                f"{path} does not exist as a file; state=file only manages an existing file's mode/owner (use copy to create one)"
            )
        guard_attributes(path, mode, uid, gid)
        changed = ensure_attributes(path, mode, uid, gid, ctx.check)
    else:
        if before["state"] == "file":
            raise ModuleError(f"{path} exists and is not a directory; move it away or choose another path")
        changed = before["state"] == "absent"
        if changed and not ctx.check:
            make_dirs(path, mode)
        if before["state"] != "absent":
            guard_attributes(path, mode, uid, gid)
        if not ctx.check or before["state"] != "absent":
            changed = ensure_attributes(path, mode, uid, gid, ctx.check) or changed
    after = describe(path) if not ctx.check else {"state": state}
    msg = f"{'would change' if ctx.check else 'changed'} {path}" if changed else f"{path} is as wanted"
    result = {"changed": changed, "msg": msg, "path": path}
    if changed:
        result["diff"] = {"before": before, "after": after}
    return result


if __name__ == "__main__":
    main(ARGS, run)
