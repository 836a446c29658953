"""Which paths the tool may delete, rename, chmod or rotate: only ones that are provably its own.

Every destructive step of a module (remove a folder, rotate a log, prune environments, chmod) calls
`managed_path` first. A path qualifies when it is absolute, has no `..` component, is not `/`, a
top-level folder, a system folder, a user's home folder or a folder holding the home, and (when a root
is given) lies inside that root once symlinks are resolved. Ownership markers (the venv role's marker
file, tiny_models' marker, the log's start marker) are checked by the module that owns the thing; this
file only answers "is the place plausible".
"""

from __future__ import annotations

import os
import pwd

from dflash_host.module import ModuleError

# Folders no tool-owned thing can be: deleting, rotating or chmodding them breaks the host.
SYSTEM_DIRS = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib32 /lib64 /media /mnt /opt /proc /root /run /sbin /srv /sys "
    "/tmp /usr /usr/bin /usr/lib /usr/local /usr/local/bin /usr/sbin /var /var/lib /var/log /var/tmp".split()
)


def home_dirs() -> set:
    """The user's home as $HOME says and as the password database says (they can differ under sudo)."""
    homes = {os.path.realpath(os.path.expanduser("~"))}
    try:
        homes.add(os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir))
    except KeyError:
        pass
    return homes


def all_home_dirs() -> set:
    """Every account's home in the password database (another user's home is never the tool's either)."""
    try:
        return {os.path.normpath(entry.pw_dir) for entry in pwd.getpwall() if entry.pw_dir.startswith("/")}
    except OSError:  # pragma: no cover - a broken name service: the current user's homes still count
        return set()


def _refuse(field: str, path: str, why: str, fix: str) -> ModuleError:
    return ModuleError(f"{field}={path!r} {why}; the tool only changes its own files. {fix}")


def check_plain(path: str, field: str) -> str:
    """`path` with `~` expanded, refused when relative or when it has a `..` component."""
    if not isinstance(path, str) or not path or "\0" in path or "\n" in path:
        raise _refuse(field, str(path), "is empty or holds a newline or NUL", "Give an absolute path.")
    expanded = os.path.expanduser(path)
    if not os.path.isabs(expanded):
        raise _refuse(field, path, "is a relative path", "Give an absolute path (or one starting with ~/).")
    if ".." in expanded.split(os.sep):
        raise _refuse(field, path, "contains '..'", "Write the path without '..' components.")
    return os.path.normpath(expanded)


def task_path(path: str, field: str) -> str:
    """A task's path as Ansible's modules read it: `~` expanded and a relative one taken from the module's
    working folder (over ssh the login home; on a local host the folder the run started in), then checked as
    `check_plain` checks an absolute one. Only for paths a task names; the tool's own settings
    (dfp_root, venv_root...) stay refused when relative (check_plain), as a relative root means nothing."""
    if isinstance(path, str) and path and "\0" not in path and "\n" not in path:
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded):
            path = os.path.join(os.getcwd(), expanded)
    return check_plain(path, field)


def managed_task_path(path: str, field: str) -> str:
    """`managed_path` for a task's path, a relative one first resolved as `task_path` resolves it: the
    absolute place is what must be plausibly the tool's own."""
    return managed_path(task_path(path, field), field)


def _why_never_owned(candidate: str) -> str | None:
    """Why `candidate` (normalised, absolute) can never be a thing of the tool's, or None."""
    if candidate in SYSTEM_DIRS or candidate in all_home_dirs():
        return f"is {candidate}, a system or home folder"
    for home in home_dirs():
        if candidate == home or home.startswith(candidate.rstrip(os.sep) + os.sep):
            return f"is {candidate}, a system or home folder (it holds the home folder {home})"
    if candidate.count(os.sep) == 1:
        return f"is {candidate}, a system or home folder (a top-level folder, often a mount point)"
    return None


def managed_path(path: str, field: str, root: str | None = None, root_field: str = "dfp_root") -> str:
    """The normalised absolute path, once it is plausible that the tool owns it; else a clear ModuleError.

    With `root`, the path (symlinks resolved) must lie strictly inside the root (resolved too), so a
    symlink planted inside the root cannot point a deletion elsewhere.
    """
    clean = check_plain(path, field)
    real = os.path.realpath(clean)
    for candidate in {clean, real}:
        why = _why_never_owned(candidate)
        if why:
            raise _refuse(field, path, why, f"Point {field} at a folder of its own, e.g. ~/dflash/....")
    if root is not None:
        root_real = os.path.realpath(check_plain(root, root_field))
        if root_real == os.sep:
            raise _refuse(root_field, root, "is /, which would make every path the tool's",
                          f"Give {root_field} a folder of its own, e.g. ~/dflash.")
        if os.path.commonpath([real, root_real]) != root_real or real == root_real:
            raise _refuse(field, path, f"is not inside {root_field} ({root_real})",
                          f"Keep {field} under {root_field}, or change {root_field}.")
    return clean
