"""Ensure a path is a directory, a file's mode/owner, or absent.

The building block of every role's layout: folders for environments, logs and configs, with the
mode and owner the service needs. Only what differs is changed.

| argument | type | default | meaning |
|---|---|---|---|
| path | path | required | the path on the host |
| state | str | directory | directory, file (must exist; only mode/owner managed), absent |
| mode | str | none | octal string such as "0750" |
| owner | str | none | user name or uid |
| group | str | none | group name or gid |
| recurse | bool | false | with state=absent, remove a non-empty directory too |
"""

from __future__ import annotations

import os
import shutil

from _common import Context, ModuleError, ensure_attributes, main, parse_mode, resolve_gid, resolve_uid

ARGS = {
    "path": {"type": "path", "required": True},
    "state": {"type": "str", "default": "directory", "choices": ["directory", "file", "absent"]},
    "mode": {"type": "str", "default": None},
    "owner": {"type": "str", "default": None},
    "group": {"type": "str", "default": None},
    "recurse": {"type": "bool", "default": False},
}


def describe(path: str) -> dict:
    """The state of a path as the diff shows it."""
    if not os.path.lexists(path):
        return {"state": "absent"}
    st = os.lstat(path)
    kind = "directory" if os.path.isdir(path) else "file"
    return {"state": kind, "mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "gid": st.st_gid}


def run(args: dict, ctx: Context) -> dict:
    path, state = args["path"], args["state"]
    mode = parse_mode(args["mode"])
    uid, gid = resolve_uid(args["owner"]), resolve_gid(args["group"])
    before = describe(path)

    if state == "absent":
        if before["state"] == "absent":
            return {"changed": False, "msg": f"{path} is already absent", "path": path}
        if before["state"] == "directory" and os.listdir(path) and not args["recurse"]:
            raise ModuleError(f"{path} is a non-empty directory; set recurse: true to remove it with its contents")
        if not ctx.check:
            if before["state"] == "directory" and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        return {"changed": True, "msg": f"removed {path}", "path": path, "diff": {"before": before, "after": {"state": "absent"}}}

    if state == "file":
        if before["state"] != "file":
            raise ModuleError(
                f"{path} does not exist as a file; state=file only manages an existing file's mode/owner (use copy to create one)"
            )
        changed = ensure_attributes(path, mode, uid, gid, ctx.check)
    else:
        if before["state"] == "file":
            raise ModuleError(f"{path} exists and is not a directory; move it away or choose another path")
        changed = before["state"] == "absent"
        if changed and not ctx.check:
            os.makedirs(path, mode=0o755 if mode is None else mode, exist_ok=True)
            if mode is not None:
                os.chmod(path, mode)  # makedirs' mode is masked by the umask
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
