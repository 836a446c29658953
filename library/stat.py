"""Report what is at a path; change nothing: ansible.builtin.stat's options, aliases and `stat` result.

No role or playbook uses it: it is here for the benchmark's workload (bench/workload/ours.yaml, the
same tasks as Ansible's) and for playbooks written for Ansible.

`stat` holds what Ansible's `stat` holds, with its names and values (tests/library/test_stat_against_ansible.py
runs both on the same paths): `{"exists": false}` alone when nothing is there (a dangling symlink followed too),
else exists, path, mode ("0644"), isdir, isreg, islnk, ischr, isblk, isfifo, issock, uid, gid, size, inode, dev,
nlink, atime, mtime, ctime, wusr/rusr/xusr, wgrp/rgrp/xgrp, woth/roth/xoth, isuid, isgid, the platform's extra
fields (Linux: blocks, block_size, device_type), readable/writeable/executable (for the user the module runs
as), pw_name and gr_name (when the ids have names), lnk_source (realpath) and lnk_target (the link's text) for a
symlink not followed, and `checksum` (checksum_algorithm, sha1 by default) of a regular file this user can read,
unless get_checksum is false. With follow, the target is described (islnk false).

Beside it, at the top level, our own fields as before: exists, isdir, isfile, islink, size, mode, uid, gid, owner,
group, mtime, sha256, lnk_target, path; every one always present (null or false when the path is absent), so
`when: not cfg.exists` never trips over an undefined variable (Ansible's way: `cfg.stat.exists`). islink and
lnk_target stay the link's with follow; a dangling link followed is exists false, islink true. sha256 is the
checksum when checksum_algorithm is sha256 (Ansible's `checksum` option is its alias: `checksum: sha256` is what
our old `checksum: true` was, which is refused now: a bool is no algorithm), else null. As Ansible's, a regular
file is read for its checksum by default (get_checksum: false to skip it) and a file this user cannot read gets
none (no failure). Never changed; msg says what is there. A failure (a folder on the way not searchable, a
symlink loop followed) starts with Ansible's words, the error's strerror.

As Ansible's, get_mime adds mimetype and charset (the `file` program; without it Python's guess from the name)
and get_attributes adds version, attributes and attr_flags (lsattr), both on by default.

Where it differs on purpose: a path under a regular file (ENOTDIR) is `{"exists": false}` where Ansible fails with
"Not a directory".
"""

from __future__ import annotations

import errno
import grp
import hashlib
import os
import pwd
import stat as st_mod

from dflash_host.host import attributes
from dflash_host.host.mime import mime_of
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "path": {"type": "path", "default": None,
             "help": "the path on the host (required: path or its alias dest or name)"},
    "dest": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "name": {"type": "path", "default": None, "alias_of": "path", "help": "alias of path"},
    "follow": {
        "type": "bool",
        "default": False,
        "help": "describe a symlink's target instead of the link (stat.islnk false; the top-level islink and "
                "lnk_target stay the link's)",
    },
    "get_checksum": {"type": "bool", "default": True,
                     "help": "add stat.checksum, the checksum_algorithm digest of a regular file this user can read"},
    "checksum_algorithm": {"type": "str", "default": "sha1",
                           "choices": ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"],  # Ansible's order
                           "help": "the digest of stat.checksum; with sha256 the top-level sha256 is it too"},
    "checksum": {"type": "str", "default": None, "alias_of": "checksum_algorithm",
                 "choices": ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"],
                 "help": "alias of checksum_algorithm (Ansible's; no longer a bool: `checksum: sha256` fills sha256)"},
    "checksum_algo": {"type": "str", "default": None, "alias_of": "checksum_algorithm",
                      "choices": ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"],
                      "help": "alias of checksum_algorithm"},
    "get_mime": {"type": "bool", "default": True,
                 "help": "add stat.mimetype and stat.charset: the `file` program's answer (without it, Python's guess "
                         "from the name, charset unknown)"},
    "mime": {"type": "bool", "default": None, "alias_of": "get_mime", "help": "alias of get_mime"},
    "mime_type": {"type": "bool", "default": None, "alias_of": "get_mime", "help": "alias of get_mime"},
    "mime-type": {"type": "bool", "default": None, "alias_of": "get_mime", "help": "alias of get_mime"},
    "get_attributes": {"type": "bool", "default": True,
                       "help": "add stat.version, stat.attributes and stat.attr_flags from lsattr (none, [] and '' "
                               "where the host has no lsattr or the filesystem no attributes)"},
    "attr": {"type": "bool", "default": None, "alias_of": "get_attributes", "help": "alias of get_attributes"},
    "attributes": {"type": "bool", "default": None, "alias_of": "get_attributes", "help": "alias of get_attributes"},
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("path", "dest", "name")

ALGORITHMS = ARGS["checksum_algorithm"]["choices"]

ABSENT = {
    "exists": False,
    "isdir": False,
    "isfile": False,
    "islink": False,
    "size": None,
    "mode": None,
    "uid": None,
    "gid": None,
    "owner": None,
    "group": None,
    "mtime": None,
    "sha256": None,
    "lnk_target": None,
}

# os.stat_result attributes some platforms have, under Ansible's names (its format_output, in its order)
_PLATFORM_FIELDS = [
    ("st_blocks", "blocks"), ("st_blksize", "block_size"), ("st_rdev", "device_type"), ("st_flags", "flags"),
    ("st_gen", "generation"), ("st_birthtime", "birthtime"),
    ("st_ftype", "file_type"), ("st_attrs", "attrs"), ("st_obtype", "object_type"),
    ("st_rsize", "real_size"), ("st_creator", "creator"), ("st_type", "file_type"),
]
_BITS = [("wusr", st_mod.S_IWUSR), ("rusr", st_mod.S_IRUSR), ("xusr", st_mod.S_IXUSR),
         ("wgrp", st_mod.S_IWGRP), ("rgrp", st_mod.S_IRGRP), ("xgrp", st_mod.S_IXGRP),
         ("woth", st_mod.S_IWOTH), ("roth", st_mod.S_IROTH), ("xoth", st_mod.S_IXOTH),
         ("isuid", st_mod.S_ISUID), ("isgid", st_mod.S_ISGID)]


def _names(st: os.stat_result) -> tuple[str | None, str | None]:
    try:
        owner: str | None = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = None
    try:
        group: str | None = grp.getgrgid(st.st_gid).gr_name
    except (KeyError, ValueError, OverflowError):
        group = None
    return owner, group


def describe(st: os.stat_result) -> dict:
    """Our top-level stat fields, from an os.stat_result (no I/O but name lookups)."""
    owner, group = _names(st)
    return {
        "isdir": st_mod.S_ISDIR(st.st_mode),
        "isfile": st_mod.S_ISREG(st.st_mode),
        "size": st.st_size,
        "mode": f"{st_mod.S_IMODE(st.st_mode):04o}",
        "uid": st.st_uid,
        "gid": st.st_gid,
        "owner": owner,
        "group": group,
        "mtime": st.st_mtime,
    }


def ansible_stat(path: str, st: os.stat_result) -> dict:
    """Ansible's `stat` dict for what `st` describes (lstat, or stat with follow), but the checksum."""
    mode = st.st_mode
    out: dict = {
        "exists": True, "path": path, "mode": f"{st_mod.S_IMODE(mode):04o}",
        "isdir": st_mod.S_ISDIR(mode), "ischr": st_mod.S_ISCHR(mode), "isblk": st_mod.S_ISBLK(mode),
        "isreg": st_mod.S_ISREG(mode), "isfifo": st_mod.S_ISFIFO(mode), "islnk": st_mod.S_ISLNK(mode),
        "issock": st_mod.S_ISSOCK(mode),
        "uid": st.st_uid, "gid": st.st_gid, "size": st.st_size, "inode": st.st_ino, "dev": st.st_dev,
        "nlink": st.st_nlink, "atime": st.st_atime, "mtime": st.st_mtime, "ctime": st.st_ctime,
    }
    out.update((name, bool(mode & bit)) for name, bit in _BITS)
    out.update((name, getattr(st, attr)) for attr, name in _PLATFORM_FIELDS if hasattr(st, attr))
    for name, how in (("readable", os.R_OK), ("writeable", os.W_OK), ("executable", os.X_OK)):
        out[name] = os.access(path, how)
    if out["islnk"]:
        out["lnk_source"] = os.path.realpath(path)
        out["lnk_target"] = os.readlink(path)
    owner, group = _names(st)
    if owner is not None:
        out["pw_name"] = owner
    if group is not None:
        out["gr_name"] = group
    return out


def digest(path: str, algorithm: str) -> str:
    try:
        h = hashlib.new(algorithm)
    except ValueError:  # md5 on a FIPS host
        raise ModuleError(f"module 'stat': this python has no {algorithm} ({path}); choose another "
                          f"checksum_algorithm: {', '.join(ALGORITHMS)}") from None
    try:
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        raise ModuleError(
            f"module 'stat': cannot read {path} for its checksum: {exc.strerror}; set get_checksum: false or fix "
            "permissions"
        ) from None
    return h.hexdigest()


def _failed(exc: OSError, path: str, follow: bool) -> ModuleError:
    """Ansible's failure (its msg: the error's strerror), ours going on with where and the fix."""
    if isinstance(exc, PermissionError):
        return ModuleError(f"{exc.strerror}: module 'stat' cannot look at {path}; a folder on the way is not "
                           "searchable by this user")
    if exc.errno == errno.ELOOP and follow:
        return ModuleError(f"{exc.strerror}: module 'stat' cannot follow {path} (a symlink loop); fix the links "
                           "or drop follow")
    return ModuleError(f"{exc.strerror}: module 'stat' cannot look at {path}")


def run(args: dict, ctx: Context) -> dict:
    path = args["path"]
    if path is None:
        raise ModuleError("missing required arguments: path; give path (or its alias dest or name): what to look at")
    result = {**ABSENT, "path": path, "changed": False, "stat": {"exists": False}}
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return {**result, "msg": f"{path} does not exist"}
    except NotADirectoryError:
        return {**result, "msg": f"{path} does not exist (a part of it is not a directory)"}
    except OSError as exc:
        raise _failed(exc, path, False) from None
    islink = st_mod.S_ISLNK(lst.st_mode)
    st = lst
    if islink:
        result["lnk_target"] = os.readlink(path)
        if args["follow"]:
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                return {**result, "islink": True, "msg": f"{path} is a dangling symlink to {result['lnk_target']}"}
            except OSError as exc:
                raise _failed(exc, path, True) from None
    result.update(describe(st), exists=True, islink=islink)
    stat = result["stat"] = ansible_stat(path, st)
    note = ""
    if stat["isreg"] and args["get_checksum"]:
        if stat["readable"]:
            stat["checksum"] = digest(path, args["checksum_algorithm"])
            if args["checksum_algorithm"] == "sha256":
                result["sha256"] = stat["checksum"]
        else:
            note = " (no checksum: this user cannot read it)"
    if args["get_mime"]:
        stat["mimetype"], stat["charset"] = mime_of(path)
    if args["get_attributes"]:
        found = attributes.read(path)
        stat.update(version=found.get("version"), attributes=found.get("attributes", []),
                    attr_flags=found.get("attr_flags", ""))
    kind = "directory" if result["isdir"] else "file" if result["isfile"] else "symlink" if islink else "special file"
    result["msg"] = f"{path} is a {kind}" + (f" -> {result['lnk_target']}" if islink else "") + note
    return result


if __name__ == "__main__":
    main(ARGS, run)
