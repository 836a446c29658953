"""Ansible's file attributes, as ansible.builtin.file, copy and lineinfile set and report them: the one place a
task module's mode, owner and group are read and set (library/file.py, library/copy.py, library/lineinfile.py;
their ARGS take them as the group "file_attributes" of dflash_host/shared_args.py). A mode given as a number, an
octal string or a symbolic mode (u+rw,g-w,o=; X, s, t and the copy forms u=g included; octal_mode where only
octal is taken), owner and group set on the path itself (a symlink is not followed: lchown), the mode a new
file gets, the fields Ansible adds to a result about its path (path_info), Ansible's names of what is at a path
(get_state) and its diff entries ({"before": {"owner": uid, "mode": "0644"}, "after": ...}).

Nothing here proves that a path may be changed: set_attributes calls the caller's `guard` (library/file.py:
dflash_host.host.paths.managed_path) before it changes anything. Standard library only.
"""
from __future__ import annotations

import grp
import os
import pwd
import re
import stat

from dflash_host.module import ModuleError

TYPE_CHECKING = False  # true for mypy; typing is never imported on the host (as in dflash_host/module.py)
if TYPE_CHECKING:  # annotations only
    from typing import Callable

_OPERATOR = re.compile(r"[+=-]")  # module_utils.basic's MODE_OPERATOR_RE, USERS_RE, PERMS_RE
_USERS = re.compile(r"^[ugo]+$")
_PERMS = re.compile(r"^[rwxXstugo]*$")
PERM_BITS = 0o7777


def current_umask() -> int:
    """The process's umask (read by setting it, as nothing else reads it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _bits(prev: int, is_dir: bool, user: str, perms: str, use_umask: bool, umask: int) -> int:
    """The bits `perms` (rwxXst and the copy forms u, g, o) stand for in `user`'s class: Ansible's
    _get_octal_mode_from_symbolic_perms."""
    keep = (umask ^ PERM_BITS) if use_umask else PERM_BITS
    x_too = is_dir or bool(prev & 0o111)
    shift = {"u": 6, "g": 3, "o": 0}[user]
    own = {
        "r": keep & (0o4 << shift),
        "w": keep & (0o2 << shift),
        "x": keep & (0o1 << shift),
        "X": (0o1 << shift) if x_too else 0,
        "s": {"u": stat.S_ISUID, "g": stat.S_ISGID, "o": 0}[user],
        "t": stat.S_ISVTX if user == "o" else 0,
    }
    for source, at in (("u", 6), ("g", 3), ("o", 0)):  # copy another class's rwx: u=g
        own[source] = (((prev >> at) & 0o7) << shift) & 0o777
    total = 0
    for p in perms:
        total |= own[p]
    return total


def _apply(user: str, operator: str, bits: int, current: int) -> int:
    if operator == "=":
        mask = {"u": stat.S_IRWXU | stat.S_ISUID, "g": stat.S_IRWXG | stat.S_ISGID, "o": stat.S_IRWXO | stat.S_ISVTX}[user]
        return (current & (mask ^ PERM_BITS)) | bits
    if operator == "+":
        return current | bits
    return current - (current & bits)


def symbolic_mode(prev: int, is_dir: bool, spec: str, umask: int | None = None) -> int:
    """The mode `spec` (chmod's symbolic form: u=rwX,g+r,o-rwx, a+x, +x) makes of `prev` on a folder or not,
    as Ansible's _symbolic_mode_to_octal computes it (an empty class is `a` less the umask's bits); ValueError
    names a bad part."""
    if umask is None:
        umask = current_umask()
    new = prev & PERM_BITS
    for part in spec.split(","):
        perms_list = _OPERATOR.split(part)
        operators = _OPERATOR.findall(part)
        users = perms_list.pop(0)
        use_umask = users == ""
        if users in ("a", ""):
            users = "ugo"
        if not _USERS.match(users):
            raise ValueError(f"bad symbolic permission for mode: {part}")
        for operator, perms in zip(operators, perms_list):
            if not _PERMS.match(perms):
                raise ValueError(f"bad symbolic permission for mode: {part}")
            for user in users:
                new = _apply(user, operator, _bits(new, is_dir, user, perms, use_umask, umask), new)
    return new


def new_file_mode() -> int:
    """The mode a file created now gets: 0666 less the umask."""
    return 0o666 & ~current_umask()


def octal_mode(mode: str | None) -> int | None:
    """A mode written in octal only ("0750", "750"): a manifest entry's, lineinfile's (no symbolic form there)."""
    if mode is None:
        return None
    try:
        value = int(str(mode), 8)
    except ValueError:
        raise ModuleError(f'mode {mode!r} is not an octal number; write it quoted, e.g. mode: "0750"')
    if not 0 <= value <= PERM_BITS:
        raise ModuleError(f"mode {mode!r} is out of range 0000-7777")
    return value


def mode_arg(value: object, module: str) -> int | str | None:
    """A task's mode as Ansible takes it: none; a number as it is (YAML makes 420 of an unquoted 0644); a string
    in octal ("0644", "644"); else a symbolic mode, checked here and applied to each path by mode_for."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ModuleError(f"mode must be in octal or symbolic form, got {value!r} (module '{module}'); write it quoted, "
                          'e.g. mode: "0644" or mode: u=rw,g=r,o=r')
    if isinstance(value, int):
        number = value
    else:
        try:
            number = int(value, 8)
        except ValueError:
            try:
                symbolic_mode(0o644, False, value, 0o022)
            except ValueError as exc:
                raise ModuleError(f"mode must be in octal or symbolic form ({exc}; module '{module}'); write it quoted, "
                                  'e.g. mode: "0644" or mode: u=rw,g=r,o=r') from None
            return value
    if not 0 <= number <= PERM_BITS:
        raise ModuleError(f"module '{module}': mode {value!r} is out of range 0000-7777 (a number is taken as it is: "
                          'quote an octal mode, e.g. mode: "0644")')
    return number


def mode_for(mode: int | str, st: os.stat_result, umask: int | None = None) -> int:
    """The mode wanted on the path `st` describes: a number as it is, a symbolic mode applied to its mode."""
    if isinstance(mode, int):
        return mode
    return symbolic_mode(stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode), mode, umask)


def mode_text(mode: int) -> str:
    """A mode as Ansible writes it in results and diffs: '0644', '04755'."""
    return f"0{mode:03o}"


def lookup_uid(owner: str | int | None, ansible_words: bool = True) -> int | None:
    """Ansible's owner: a number (or a uid already looked up) as a uid, else a user name. No such user: Ansible's
    words, or (ansible_words false: lineinfile's and a copy manifest's, as they always said it) ours."""
    if owner is None or isinstance(owner, int):
        return owner
    try:
        return int(owner)
    except ValueError:
        pass
    try:
        return pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise ModuleError(f"chown failed: failed to look up user {owner}; create the user or fix 'owner'" if ansible_words
                          else f"owner {owner!r} does not exist on this host; create the user or fix 'owner'") from None


def lookup_gid(group: str | int | None, ansible_words: bool = True) -> int | None:
    """lookup_uid for a group."""
    if group is None or isinstance(group, int):
        return group
    try:
        return int(group)
    except ValueError:
        pass
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ModuleError(f"chgrp failed: failed to look up group {group}; create the group or fix 'group'"
                          if ansible_words else f"group {group!r} does not exist on this host; create it or fix "
                          "'group'") from None


def _known(value: str, by_number, by_name) -> bool:
    try:
        number = int(value)
    except ValueError:
        number = None
    try:
        by_name(value) if number is None else by_number(number)
    except KeyError:
        return False
    return True


def unknown_ids(owner: str | None, group: str | None) -> list[str]:
    """Ansible's check-mode warnings for an owner or group this host does not know (yet)."""
    out = []
    if owner is not None and not _known(owner, pwd.getpwuid, pwd.getpwnam):
        out.append(f"failed to look up user {'with uid ' if owner.isdigit() else ''}{owner}. Create user up to this "
                   "point in real play")
    if group is not None and not _known(group, grp.getgrgid, grp.getgrnam):
        out.append(f"failed to look up group {'with gid ' if group.isdigit() else ''}{group}. Create group up to this "
                   "point in real play")
    return out


def _note(diff: dict | None, key: str, before: object, after: object) -> None:
    if diff is not None:
        diff.setdefault("before", {})[key] = before
        diff.setdefault("after", {})[key] = after


def set_attributes(path: str, mode: int | str | None, owner: str | int | None, group: str | int | None, check: bool,
                   diff: dict | None = None, guard: Callable[[str], object] | None = None) -> bool:
    """Ansible's set_fs_attributes_if_different, the one setter of a path's mode and owner: owner, group (on the
    path itself: a symlink's own ids), then mode (not on a symlink: Linux has no mode of its own for one), each
    where it differs; the differences noted in `diff`. guard(path) runs before anything changes (in check mode
    too, so that check mode refuses alike). In check mode, a path that does not exist yet counts as changed when
    anything is asked."""
    if mode is None and owner is None and group is None:
        return False
    if check and not os.path.exists(path):
        return True
    st = os.lstat(path)
    uid, gid = lookup_uid(owner), lookup_gid(group)
    new_uid = uid if uid is not None and uid != st.st_uid else None
    new_gid = gid if gid is not None and gid != st.st_gid else None
    target = mode_for(mode, st) if mode is not None and not stat.S_ISLNK(st.st_mode) else None
    want = target if target != stat.S_IMODE(st.st_mode) else None
    if new_uid is None and new_gid is None and want is None:
        return False
    if guard is not None:
        guard(path)
    if new_uid is not None:
        _note(diff, "owner", st.st_uid, new_uid)
    if new_gid is not None:
        _note(diff, "group", st.st_gid, new_gid)
    if want is not None:
        _note(diff, "mode", mode_text(stat.S_IMODE(st.st_mode)), mode_text(want))
    if check:
        return True
    if new_uid is not None or new_gid is not None:  # before chmod: the kernel clears setuid/setgid bits on chown
        try:
            os.lchown(path, -1 if new_uid is None else new_uid, -1 if new_gid is None else new_gid)
        except OSError as exc:
            raise ModuleError(f"chown failed: {exc.strerror} ({path}); changing an owner needs root (become: true)",
                              path=path) from None
        cleared = stat.S_IMODE(os.lstat(path).st_mode)
        if want is None and target is not None and cleared != target:
            # the chown cleared setuid/setgid bits the mode keeps: set them again (Ansible reads the mode anew)
            want = target
            _note(diff, "mode", mode_text(cleared), mode_text(target))
    if want is not None:
        try:
            os.chmod(path, want)
        except OSError as exc:
            raise ModuleError(f"chmod failed: {exc.strerror} ({path}); only its owner (or root) may change its mode",
                              path=path) from None
    return True


def get_state(path: str) -> str:
    """What is at `path`, in Ansible's words: absent, link, directory, hard (a file with other names), file."""
    try:
        if not os.path.lexists(path):
            return "absent"
        if os.path.islink(path):
            return "link"
        if os.path.isdir(path):
            return "directory"
        return "hard" if os.stat(path).st_nlink > 1 else "file"
    except FileNotFoundError:
        return "absent"


def path_info(path: str) -> dict:
    """The fields Ansible adds to a result naming a path that exists (a symlink's target exists): uid, gid, owner,
    group, mode and size of the path itself, and its state as get_state says it; nothing when it does not."""
    if not os.path.exists(path):
        return {}
    st = os.lstat(path)
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"uid": st.st_uid, "gid": st.st_gid, "owner": owner, "group": group,
            "mode": mode_text(stat.S_IMODE(st.st_mode)), "state": get_state(path), "size": st.st_size}
