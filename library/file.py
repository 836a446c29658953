"""Ensure what is at a path: a directory, a file's mode/owner/times, a symlink, a hard link, a touched file, or
nothing: ansible.builtin.file's options, aliases, results and messages.

The building block of every role's layout (folders for environments, logs and configs, with the mode and owner
the service needs), and what a playbook written for Ansible gets: `path` (aliases dest, name); `state` absent,
directory, file, hard, link, touch (none: what is there now, else directory with recurse, else file); `src` of a
link (relative to the link's folder) or a hard link; `force`, `follow` (true: a symlink's target gets the mode,
owner and times), `recurse` (with directory: mode, owner, group and times on everything inside); `mode` as a
number, an octal string or symbolic (u+rw,g-w,o=); `owner`, `group`; `modification_time` and `access_time`
(preserve, now, or a time in *_time_format; touch's default is now, so a touch changes every run). Results as
Ansible's: path (dest and src for link, hard and touch), changed, and for a path that exists its uid, gid, owner,
group, mode ("0644"), state and size; `diff` ({before, after}: path, state, mode, owner, group, mtime, atime;
path_content of a folder removed) with --diff only; failures start with Ansible's words ("file (/x) is absent,
cannot continue"); beside them ours: msg. A task naming none of path, dest, name is refused by the module (the
engine's load-time check cannot know an alias). tests/library/test_file_against_ansible.py runs both on copies of
the same trees.

Only what can be the tool's is changed:
- a relative path (and a hard link's relative src) is taken from the worker's working folder, as Ansible's
  from its module's (over ssh the login home; locally the run's folder, Ansible's the playbook's), and checked as the absolute place it names;
- absent refuses `/`, top-level, system and home folders (and the folders holding the home) and paths with
  `..` (dflash_host/host/paths.py), before anything is looked at; a non-empty folder only goes with
  recurse: true (Ansible removes it whatever it holds, and refuses recurse beside absent); a symlink goes, never
  what it points at;
- a path that exists keeps its mode and owner unless the task names one; the mode or owner of a system or home
  folder is never changed (managed_path before any chmod or chown, a link's target and everything recurse
  reaches included), nor is a file or folder replaced by a link (force) unless managed_path accepts it;
- folders it creates get 0755 (less what the umask takes away), parents included; `mode`, `owner` and `group`
  set the last one only (Ansible gives them to every folder it creates);
- recurse with follow sets a symlink's target too (a linked folder's content included), as Ansible's, each
  place judged by managed_path first; without follow only the link's own owner and group are set;
- a symlink's own mode is not looked at (Linux has none): Ansible's check mode calls a mode on one a change.
`attributes` (chattr's +i, -a, =A) are set with chattr where the host has it, as Ansible's. SELinux options and
unsafe_writes are not arguments: a task using them is refused when the playbook
is loaded. A mode or a time that cannot be read is refused before anything is looked at (Ansible's only when it
is applied).
"""

from __future__ import annotations

import os

from dflash_host.host import attributes
from dflash_host.host.fileattrs import get_state, mode_arg, path_info, set_attributes, unknown_ids
from dflash_host.host.paths import managed_path, managed_task_path, task_path
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "path": {"type": "path", "default": None,
             "help": "the path on the host (absolute, or starting with ~/); required: path or its alias dest or name"},
    "dest": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "name": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "state": {
        "type": "str",
        "default": None,
        "choices": ["absent", "directory", "file", "hard", "link", "touch"],
        "help": "directory (made with its parents), file (must exist: mode/owner/times only), link, hard, touch "
                "(an empty file made, or the times set to now), absent; none: what is there now, else directory "
                "with recurse, else file",
    },
    "src": {"type": "path", "default": None,
            "help": "what a link points to (state link: relative to the link's folder, may not exist with force; "
                    "state hard: an absolute path that exists)"},
    "recurse": {"type": "bool", "default": False,
                "help": "state directory: mode, owner, group and times on everything inside too; state absent (ours): "
                        "accepted (a folder goes with its contents either way, as Ansible's)"},
    "force": {"type": "bool", "default": False,
              "help": "link/hard: replace a file (or an empty folder) at path, link to a src that does not exist yet"},
    "follow": {"type": "bool", "default": True,
               "help": "a symlink at path: its target gets the mode, owner, group and times (state file/directory: "
                       "the target is what is managed)"},
    "_groups": ("file_attributes",),  # mode, owner, group: dflash_host/shared_args.py
    "attributes": {"type": "str", "default": None,
                   "help": "file attributes as chattr takes them (+i, -a, =A; letters alone: exactly those), read "
                           "with lsattr; nothing is done where the host has no chattr"},
    "attr": {"type": "str", "default": None, "alias_of": "attributes", "help": "alias of attributes"},
    "modification_time": {"type": "str", "default": None,
                          "help": "preserve, now, or a time in modification_time_format; none: preserve (touch: now)"},
    "modification_time_format": {"type": "str", "default": "%Y%m%d%H%M.%S", "help": "strftime format of modification_time"},
    "access_time": {"type": "str", "default": None,
                    "help": "preserve, now, or a time in access_time_format; none: preserve (touch: now)"},
    "access_time_format": {"type": "str", "default": "%Y%m%d%H%M.%S", "help": "strftime format of access_time"},
    "_diff_peek": {"type": "bool", "default": None,
                   "help": "internal (Ansible's action plugins): only say whether path appears binary, change nothing"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("path", "dest", "name", "src")

NEW_DIR_MODE = 0o755  # folders the tool creates: the server and the ssh user read them; secrets sit in 0600 files
NOW = "now"


def guard(path: str) -> None:
    """Refuse to change the mode or owner of a path the tool cannot own (e.g. dfp_root=/tmp with a mode)."""
    managed_path(path, "path")


class Call:
    """One call's checked arguments: the mode (a number or a symbolic mode), the times, check and diff."""

    def __init__(self, args: dict, ctx: Context, state: str) -> None:
        self.mode = mode_arg(args["mode"], "file")
        self.owner, self.group = args["owner"], args["group"]
        self.attrs = args["attributes"]
        self.follow, self.force, self.recurse = args["follow"], args["force"], args["recurse"]
        self.check = ctx.check
        self.ctx = ctx
        self.mtime = self.atime = None
        if state != "absent":  # Ansible reads the times only where it sets them
            default = NOW if state == "touch" else "preserve"
            self.mtime = _timestamp(args["modification_time"] or default, args["modification_time_format"])
            self.atime = _timestamp(args["access_time"] or default, args["access_time_format"])

    def attributes(self, path: str, diff: dict | None, made: bool = False) -> bool:
        """Mode, owner, group, then the times, where they differ; `made`: a path this call created, needing no
        guard (a new folder at the top level, /srv/app, gets its mode)."""
        changed = set_attributes(path, self.mode, self.owner, self.group, self.check, diff, None if made else guard)
        if self.attrs and not os.path.islink(path):
            changed = attributes.ensure(path, self.attrs, self.check, diff) or changed
        return update_times(path, self.mtime, self.atime, self.check, diff) or changed

    def target(self, path: str) -> str:
        """Where the attributes go: a symlink's target with follow (Ansible's load_file_common_arguments)."""
        return os.path.realpath(path) if self.follow and os.path.islink(path) else path


def _timestamp(value: str, fmt: str):
    """None (preserve), NOW, or the seconds `value` stands for in `fmt` (local time)."""
    if value == "preserve":
        return None
    if value == NOW:
        return NOW
    import time

    try:
        return time.mktime(time.strptime(value, fmt))
    except (ValueError, OverflowError) as exc:
        raise ModuleError(f"Error while obtaining timestamp for time {value} using format {fmt}: {exc}; give preserve, "
                          "now or a time in that format") from None


def update_times(path: str, mtime, atime, check: bool, diff: dict | None) -> bool:
    """Ansible's update_timestamp_for_file: both now sets the clock's time (a change every time); else the
    times asked that differ."""
    if mtime is None and atime is None:
        return False
    import time

    try:
        st = os.stat(path)
        if mtime == NOW and atime == NOW:
            mtime = atime = time.time()
            set_time = None
        else:
            mtime = st.st_mtime if mtime is None else time.time() if mtime == NOW else mtime
            atime = st.st_atime if atime is None else time.time() if atime == NOW else atime
            if mtime == st.st_mtime and atime == st.st_atime:
                return False
            set_time = (atime, mtime)
        if not check:
            os.utime(path, set_time)
    except OSError as exc:
        raise ModuleError(f"Error while updating modification or access time: {exc}; fix the path's permissions") from None
    if diff is not None:
        for key, before, after in (("mtime", st.st_mtime, mtime), ("atime", st.st_atime, atime)):
            if after != before:
                diff.setdefault("before", {})[key] = before
                diff.setdefault("after", {})[key] = after
    return True


def initial_diff(path: str, state: str, prev: str) -> dict:
    diff: dict = {"before": {"path": path}, "after": {"path": path}}
    if prev != state:
        diff["before"]["state"], diff["after"]["state"] = prev, state
        if state == "absent" and prev == "directory":
            walked: dict = {"directories": [], "files": []}
            for base, folders, files in os.walk(path):
                walked["directories"] += [os.path.join(base, f) for f in folders]
                walked["files"] += [os.path.join(base, f) for f in files]
            diff["before"]["path_content"] = walked
    return diff


# ---------------------------------------------------------------- states


def ensure_absent(path: str, c: Call) -> dict:
    """state=absent, once managed_path has accepted the path: a symlink goes, never what it points at."""
    prev = get_state(path)
    if prev == "absent":
        return {"path": path, "changed": False, "state": "absent", "msg": f"{path} is already absent"}
    diff = initial_diff(path, "absent", prev)
    if not c.check:
        if prev == "directory":
            import shutil  # here: its import (bz2, lzma, fnmatch) costs every run on every host

            try:
                shutil.rmtree(path)
            except OSError as exc:
                raise ModuleError(f"rmtree failed: {exc}; fix the permissions inside {path}") from None
        else:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise ModuleError(f"Unlinking failed. {exc.strerror}: fix the permissions of its folder", path=path) from None
    return {"path": path, "changed": True, "diff": diff, "state": "absent", "msg": f"removed {path}"}


def ensure_file(path: str, c: Call) -> dict:
    prev = get_state(path)
    if prev != "file" and c.follow and prev == "link":
        path = os.path.realpath(path)
        prev = get_state(path)
    if prev not in ("file", "hard"):
        raise ModuleError(f"file ({path}) is {prev}, cannot continue; state=file only manages an existing file "
                          "(state=touch or copy creates one)", path=path, state=prev)
    diff = initial_diff(path, "file", prev)
    return {"path": path, "changed": c.attributes(path, diff), "diff": diff}


def make_dirs(path: str) -> list:
    """Create `path` and its missing parents (NEW_DIR_MODE, umask applies). An existing parent keeps its mode."""
    missing = []
    at = path
    while not os.path.lexists(at):
        missing.append(at)
        at = os.path.dirname(at)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, NEW_DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise ModuleError(f"There was an issue creating {folder} as requested: it exists and is not a folder; "
                                  "move it away or choose another path", path=path) from None
        except OSError as exc:
            raise ModuleError(f"There was an issue creating {folder} as requested: {exc.strerror}; fix the parent "
                              "folder or choose another path", path=path) from None
    return list(reversed(missing))


def ensure_directory(path: str, c: Call) -> dict:
    prev = get_state(path)
    if c.follow and prev == "link":
        path = os.path.realpath(path)
        prev = get_state(path)
    diff = initial_diff(path, "directory", prev)
    if prev == "absent":
        if c.check:
            return {"path": path, "changed": True, "diff": diff}
        make_dirs(path)
        c.attributes(path, diff, made=True)
        return {"path": path, "changed": True, "diff": diff}
    if prev != "directory":
        raise ModuleError(f"{path} already exists as a {prev}; move it away or choose another path", path=path)
    changed = c.attributes(path, diff)
    if c.recurse:
        changed = recursive_attributes(path, c) or changed
    return {"path": path, "changed": changed, "diff": diff}


def recursive_attributes(top: str, c: Call, seen: set | None = None) -> bool:
    """Mode, owner, group and times on everything under `top`; a symlink gets its own owner and group and, with
    follow (Ansible's), its target gets them too, a linked folder's content included, wherever it lies: each
    place is still judged by managed_path (guard) before its mode or owner changes. `seen`: the real folders
    walked, so that a link back up ends the walk where Ansible's recursion would fail."""
    seen = {os.path.realpath(top)} if seen is None else seen
    changed = False
    for base, folders, files in os.walk(top):
        for name in folders + files:
            path = os.path.join(base, name)
            if not os.path.islink(path):
                changed = c.attributes(path, None) or changed
                continue
            changed = set_attributes(path, None, c.owner, c.group, c.check, None, guard) or changed
            if c.follow:
                changed = _follow_link(os.path.realpath(path), c, seen) or changed
    return changed


def _follow_link(target: str, c: Call, seen: set) -> bool:
    """recurse with follow: the attributes on a link's existing target (its real place), and into it when it is
    a folder."""
    if not os.path.exists(target):
        return False
    changed = False
    if os.path.isdir(target) and target not in seen:
        seen.add(target)
        changed = recursive_attributes(target, c, seen)
    return c.attributes(target, None) or changed


def _replace(path: str, prev: str, make) -> None:
    """Put a new link at `path` in place of what is there (Ansible's temp name, then a rename)."""
    import time

    tmp = os.path.join(os.path.dirname(path), f".{os.getpid()}.{time.time()}.tmp")
    try:
        if prev == "directory":
            os.rmdir(path)
        make(tmp)
        os.rename(tmp, path)
    except OSError as exc:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise ModuleError(f"Error while replacing: {exc}; fix the permissions of {os.path.dirname(path)}", path=path) from None


def ensure_symlink(path: str, src: str | None, c: Call) -> dict:
    prev = get_state(path)
    if src is None and c.follow and os.path.exists(path) and os.path.islink(path):
        src = os.readlink(path)
    folder = path if not os.path.islink(path) and os.path.isdir(path) else os.path.dirname(path)
    absrc = None if src is None else os.path.join(folder, src)
    if not c.force and absrc is not None and not os.path.exists(absrc):
        raise ModuleError(f"src file does not exist, use 'force=yes' if you really want to create the link: {absrc}",
                          path=path, src=src)
    if prev == "directory":
        if not c.force:
            raise ModuleError(f"refusing to convert from {prev} to symlink for {path}; set force: true to replace an "
                              "empty folder", path=path)
        if os.listdir(path):
            raise ModuleError(f"the directory {path} is not empty, refusing to convert it", path=path)
    elif prev in ("file", "hard") and not c.force:
        raise ModuleError(f"refusing to convert from {prev} to symlink for {path}; set force: true to replace it",
                          path=path)
    diff = initial_diff(path, "link", prev)
    changed = False
    if prev != "link":
        if src is None:
            raise ModuleError("src is required for creating new symlinks")  # Ansible's words
        changed = True
    elif src is not None:
        old = os.readlink(path)
        if old != src:
            diff["before"]["src"], diff["after"]["src"] = old, src
            changed = True
    if changed and not c.check:
        if prev != "absent":
            managed_path(path, "path")  # what is there goes: only where the tool may delete
            _replace(path, prev, lambda tmp: os.symlink(src, tmp))
        else:
            try:
                os.symlink(src, path)
            except OSError as exc:
                raise ModuleError(f"Error while linking: {exc}; fix the folder or choose another path", path=path) from None
    elif changed and prev != "absent":
        managed_path(path, "path")  # check mode refuses as the real run would
    result = {"dest": path, "src": src, "changed": changed, "diff": diff}
    if c.check and not os.path.exists(path):
        return result
    target = c.target(path)
    if c.follow and os.path.islink(path) and not os.path.exists(target):
        c.ctx.warn("Cannot set fs attributes on a non-existent symlink target. follow should be set to False to "
                   "avoid this.")
    else:
        result["changed"] = c.attributes(target, diff) or changed
    return result


def ensure_hardlink(path: str, src: str | None, c: Call) -> dict:
    prev = get_state(path)
    target = c.target(path)
    if prev != "hard" and src is None:
        raise ModuleError("src is required for creating new hardlinks")  # Ansible's words, which its tests read
    if src is not None:
        if not os.path.exists(os.path.expanduser(src)):  # Ansible's words and fields, before a relative src is refused
            raise ModuleError("src does not exist", dest=path, src=src)
        src = task_path(src, "src")
    diff = initial_diff(path, "hard", prev)
    changed = False
    if prev == "absent":
        changed = True
    elif prev == "link":
        old = os.readlink(path)
        if old != src:
            diff["before"]["src"], diff["after"]["src"] = old, src
            changed = True
    elif prev == "hard":
        if src is not None and os.stat(path).st_ino != os.stat(src).st_ino:
            changed = True
            if not c.force:
                raise ModuleError("Cannot link, different hard link exists at destination; set force: true to replace it",
                                  dest=path, src=src)
    elif prev == "file":
        changed = True
        if not c.force:
            raise ModuleError("Cannot link, file exists at destination; set force: true to replace it", dest=path, src=src)
    elif prev == "directory":
        changed = True
        if os.stat(path).st_ino == os.stat(src).st_ino:
            return {"path": path, "changed": False}
        if not c.force:
            raise ModuleError("Cannot link: different hard link exists at destination", dest=path, src=src)
    if changed:
        if prev != "absent":
            managed_path(path, "path")  # what is there goes: only where the tool may delete
        if not c.check:
            if prev != "absent":
                _replace(path, prev, lambda tmp: os.link(src, tmp, follow_symlinks=c.follow))
            else:
                try:
                    os.link(src, path, follow_symlinks=c.follow)
                except OSError as exc:
                    raise ModuleError(f"Error while linking: {exc}; a hard link needs src on the same filesystem",
                                      path=path) from None
    result = {"dest": path, "src": src, "changed": changed, "diff": diff}
    if c.check and not os.path.exists(path):
        return result
    result["changed"] = c.attributes(target, diff) or changed
    return result


def execute_touch(path: str, c: Call) -> dict:
    prev = get_state(path)
    changed = False
    if prev == "absent":
        if c.check:
            return {"dest": path, "changed": True}
        try:
            open(path, "wb").close()  # noqa: SIM115 - an empty file, as Ansible's touch makes it (0666 less the umask)
        except OSError as exc:
            raise ModuleError(f"Error, could not touch target. {exc.strerror}: fix the folder or choose another path",
                              path=path) from None
        changed = True
    diff = initial_diff(path, "touch", prev)
    try:
        changed = c.attributes(c.target(path), diff) or changed
    except ModuleError:
        if prev == "absent":  # made by this call: it goes again
            os.remove(path)
        raise
    return {"dest": path, "changed": changed, "diff": diff}


# ---------------------------------------------------------------- the call


def _state_and_path(args: dict) -> tuple[str | None, str]:
    """The state asked and the path, checked (absent: by managed_path, before anything is looked at)."""
    if args["path"] is None:
        raise ModuleError("missing required arguments: path")  # Ansible's words, which its file target reads
    path = os.path.expandvars(args["path"])  # Ansible's path type expands $VARS too
    state = args["state"]
    if state == "absent":
        return state, managed_task_path(path, "path")
    path = task_path(path, "path")
    src = args["src"]
    if state == "hard" and src and os.path.isdir(path):  # Ansible: a folder as path means the file src names in it
        path = os.path.join(path, os.path.basename(src))
    return state, path


def _message(result: dict, state: str, check: bool) -> str:
    where = result.get("path") or result.get("dest")
    if not result["changed"]:
        return f"{where} is as wanted ({state})"
    return f"{'would change' if check else 'changed'} {where} ({state})"


def appears_binary(path: str) -> bool:
    """Ansible's _diff_peek guess: a NUL byte in the first 8 KiB; a file that cannot be read counts as text."""
    try:
        with open(path, "rb") as fh:
            return b"\x00" in fh.read(8192)
    except OSError:
        return False


def run(args: dict, ctx: Context) -> dict:
    state, path = _state_and_path(args)
    if args["_diff_peek"] is not None:
        return {"path": path, "changed": False, "appears_binary": appears_binary(path), **path_info(path)}
    src = os.path.expandvars(args["src"]) if args["src"] is not None else None
    if state is None:
        prev = get_state(path)
        state = prev if prev != "absent" else "directory" if args["recurse"] else "file"
    if args["recurse"] and state not in ("directory", "absent"):
        raise ModuleError("recurse option requires state to be 'directory'", path=path)
    if src and state not in ("link", "hard"):
        raise ModuleError("src option requires state to be 'link' or 'hard'", path=path)
    c = Call(args, ctx, state)
    if ctx.check and state != "absent":
        for warning in unknown_ids(args["owner"], args["group"]):
            ctx.warn(warning)
    if state == "absent":
        result = ensure_absent(path, c)
    elif state == "file":
        result = ensure_file(path, c)
    elif state == "directory":
        result = ensure_directory(path, c)
    elif state == "link":
        result = ensure_symlink(path, src, c)
    elif state == "hard":
        result = ensure_hardlink(path, src, c)
    else:
        result = execute_touch(path, c)
    if not ctx.diff:
        result.pop("diff", None)
    result.update(path_info(result.get("path") or result["dest"]))
    result.setdefault("msg", _message(result, state, ctx.check))
    return result


if __name__ == "__main__":
    main(ARGS, run)
