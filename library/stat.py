"""Report what is at a path (exists, kind, size, mode, owner, times, optional sha256); change nothing.

No role or playbook uses it: it is here for the benchmark's workload (bench/workload/ours.yaml, the
same tasks as Ansible's) and for user playbooks.

For decisions in later tasks: `when: not drafter_cfg.exists`, or comparing a checksum. Every key is
always present (null or false when the path is absent), so a `when` on a missing path never trips
over an undefined variable.

Result: exists, isdir, isfile, islink, size, mode ("0644"), uid, gid, owner, group, mtime (epoch s),
sha256 (with checksum, for a file), lnk_target (the link's text), path. Never changed.
"""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat as st_mod

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "path": {"type": "path", "required": True, "help": "the path on the host"},
    "follow": {
        "type": "bool",
        "default": False,
        "help": "describe a symlink's target instead of the link (islink and lnk_target stay the link's)",
    },
    "checksum": {"type": "bool", "default": False, "help": "add the sha256 of a regular file"},
}

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


def describe(st: os.stat_result) -> dict:
    """The stat fields the result reports, from an os.stat_result (no I/O but name lookups)."""
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = None
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = None
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


def run(args: dict, ctx: Context) -> dict:
    path = args["path"]
    result = {**ABSENT, "path": path, "changed": False}
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return {**result, "msg": f"{path} does not exist"}
    except NotADirectoryError:
        return {**result, "msg": f"{path} does not exist (a part of it is not a directory)"}
    except PermissionError:
        raise ModuleError(
            f"module 'stat': permission denied looking at {path}; a folder on the way is not searchable by this user"
        )
    islink = st_mod.S_ISLNK(lst.st_mode)
    st = lst
    if islink:
        result["lnk_target"] = os.readlink(path)
        if args["follow"]:
            try:
                st = os.stat(path)
            except OSError:
                return {
                    **result,
                    "exists": False,
                    "islink": True,
                    "msg": f"{path} is a dangling symlink to {result['lnk_target']}",
                }
    result.update(describe(st), exists=True, islink=islink)
    if args["checksum"] and result["isfile"]:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as exc:
            raise ModuleError(
                f"module 'stat': cannot read {path} for its checksum: {exc.strerror}; drop checksum or fix permissions"
            )
        result["sha256"] = h.hexdigest()
    kind = "directory" if result["isdir"] else "file" if result["isfile"] else "symlink" if islink else "special file"
    result["msg"] = f"{path} is a {kind}" + (f" -> {result['lnk_target']}" if islink else "")
    return result


if __name__ == "__main__":
    main(ARGS, run)
