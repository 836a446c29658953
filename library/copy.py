"""Ensure a file has the given content, mode and owner; or a folder holds a given set of files.

One file: `content` (text) or `content_b64` (bytes), written atomically, only when its sha256 differs.
A folder (the engine drives this for `src:` on the control node): `manifest` lists the files by path,
sha256 and mode; phase `plan` says which files the host lacks, the engine uploads those to temp
files, and phase `install` checks each upload's sha256 and renames it into place.

Folder mode results: `needed` (paths whose content differs or is missing), `mode_changes`,
`owner_changes`, `extra` (with delete_extra), `would_change`; install adds `installed`, `deleted`.
Plan is changed=false, except in check mode where it reports `would_change` (the plan is then the
answer). Install in check mode needs no uploads. The engine should run install whenever the plan
says `would_change` (a mode fix or an extra file needs no upload). Staged files are consumed (moved
into place, or removed when not needed); paths with equal content may share one upload. Put them on
dest's filesystem so the rename is atomic. Parent folders missing on the host are created (0755).
The folder's helpers (manifest checks, scanning, placing uploads) are dflash_host/host/manifest.py.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import posixpath
import re
import stat

from dflash_host.host.files import atomic_write, ensure_attributes, parse_mode, read_bytes, resolve_gid, resolve_uid
from dflash_host.host.manifest import (
    NEW_DIR_MODE,
    NEW_FILE_MODE,
    check_delete_extra_dest,
    check_manifest,
    existing_files,
    extra_paths,
    place,
    plan_entries,
    prune_empty_dirs,
    scan_entry,
    sha256_file,
)
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "dest": {
        "type": "path",
        "required": True,
        "help": "the file (or, with manifest, the folder) on the host; a symlink is followed",
    },
    "content": {"type": "str", "default": None, "help": "the file's text (UTF-8)"},
    "content_b64": {"type": "str", "default": None, "help": "the file's bytes, base64"},
    "mode": {
        "type": "str",
        "default": None,
        "help": "octal string such as \"0640\" (new files get 0644; with manifest: the default for its entries)",
    },
    "owner": {"type": "str", "default": None, "help": "user name or uid"},
    "group": {"type": "str", "default": None, "help": "group name or gid"},
    "backup": {"type": "bool", "default": False, "help": "keep a timestamped copy of a file whose content is replaced"},
    "manifest": {
        "type": "list",
        "default": None,
        "help": "folder mode: the files, [{\"path\": \"a/b.txt\", \"sha256\": \"...\", \"mode\": \"0644\"}, ...]",
    },
    "phase": {
        "type": "str",
        "default": "plan",
        "choices": ["plan", "install"],
        "help": "folder mode: plan (changes nothing, returns `needed`) or install",
    },
    "staged": {
        "type": "dict",
        "default": None,
        "help": "folder mode, install: {relative path: host path of the uploaded temp file}",
    },
    "delete_extra": {
        "type": "bool",
        "default": False,
        "help": "folder mode: remove files under dest that the manifest does not list",
    },
}

DIFF_TEXT_LIMIT = 256 * 1024  # larger contents show as a summary in the diff


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_for_diff(data: bytes | None) -> str | None:
    """Text as-is; binary or large content as a one-line summary."""
    if data is None:
        return None
    if len(data) <= DIFF_TEXT_LIMIT:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return f"<{len(data)} bytes, sha256 {sha256_bytes(data)}>"


def decide_file(
    current: bytes | None, cur_mode: int | None, cur_ids: tuple, data: bytes, mode: int | None, ids: tuple
) -> list[str]:
    """What differs between the file as found and as wanted: a list of 'content', 'mode', 'owner'."""
    what = []
    if current is None or current != data:
        what.append("content")
    if mode is not None and cur_mode is not None and cur_mode != mode:
        what.append("mode")
    if cur_ids and any(want is not None and want != have for want, have in zip(ids, cur_ids)):
        what.append("owner")
    return what


# ---------------------------------------------------------------- single file


def _describe(path: str, data: bytes | None) -> dict:
    if data is None:
        return {"state": "absent"}
    st = os.stat(path)
    return {
        "state": "file",
        "mode": f"{st.st_mode & 0o7777:04o}",
        "uid": st.st_uid,
        "gid": st.st_gid,
        "content": content_for_diff(data),
    }


def file_data(args: dict) -> bytes:
    """The file's bytes from content or content_b64 (exactly one), refusing folder-mode arguments."""
    for name in ("staged",):
        if args[name]:
            raise ModuleError(f"module 'copy': argument '{name}' belongs to folder mode; give 'manifest' too or drop it")
    if args["delete_extra"]:
        raise ModuleError("module 'copy': delete_extra only works with 'manifest' (folder mode); drop it")
    if (args["content"] is None) == (args["content_b64"] is None):
        raise ModuleError(
            "module 'copy': give exactly one of 'content' (text) or 'content_b64' (base64 bytes) "
            "(or 'manifest' for a folder); for a file on the control node use src:"
        )
    if args["content"] is not None:
        return args["content"].encode("utf-8")
    try:
        return base64.b64decode(args["content_b64"], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ModuleError(f"module 'copy': content_b64 is not valid base64 ({exc}); encode the bytes with base64")


def run_file(args: dict, ctx: Context) -> dict:
    data = file_data(args)
    mode = parse_mode(args["mode"])
    uid, gid = resolve_uid(args["owner"]), resolve_gid(args["group"])
    dest = os.path.realpath(args["dest"])
    if os.path.isdir(dest):
        raise ModuleError(f"module 'copy': dest {args['dest']} is a directory; give the file's full path (folder/NAME)")
    try:
        current = read_bytes(dest)
    except OSError as exc:
        raise ModuleError(f"module 'copy': cannot read {dest}: {exc.strerror}; fix its permissions or the path")
    cur_mode, cur_ids = None, ()
    if current is not None:
        st = os.stat(dest)
        cur_mode, cur_ids = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    sha = sha256_bytes(data)
    base = {"dest": dest, "sha256": sha, "size": len(data)}
    what = decide_file(current, cur_mode, cur_ids, data, mode, (uid, gid))
    if not what:
        return {**base, "changed": False, "msg": f"{dest} is as wanted (sha256 {sha[:12]})"}
    verb = "create" if current is None else "update " + "/".join(what) + " of"
    before = _describe(dest, current) if ctx.diff else None
    if ctx.check:
        result = {**base, "changed": True, "msg": f"check mode: would {verb} {dest}"}
        if ctx.diff:
            after = {"state": "file", "content": content_for_diff(data)}
            if mode is not None or cur_mode is not None:
                after["mode"] = f"{mode if mode is not None else cur_mode:04o}"
            result["diff"] = {"before": before, "after": after}
        return result
    backup_file = None
    try:
        parent = os.path.dirname(dest)
        if not os.path.isdir(parent):
            os.makedirs(parent, mode=NEW_DIR_MODE)
        if "content" in what:
            backup_file = atomic_write(dest, data, mode if mode is not None else cur_mode, args["backup"])
        ensure_attributes(dest, mode, uid, gid, False)
    except OSError as exc:
        raise ModuleError(f"module 'copy': cannot write {dest}: {exc.strerror}; fix the permissions of the path or its folder")
    done = "created" if current is None else "updated " + "/".join(what) + " of"
    result = {**base, "changed": True, "msg": f"{done} {dest}"}
    if backup_file:
        result["backup_file"] = backup_file
    if ctx.diff:
        result["diff"] = {"before": before, "after": _describe(dest, data)}
    return result


# ---------------------------------------------------------------- folder (manifest)


def folder_args(args: dict) -> dict:
    """The folder-mode arguments checked: entries, uid, gid, dest_real, staged {path: upload}, wanted {path: entry}."""
    for name in ("content", "content_b64"):
        if args[name] is not None:
            raise ModuleError(f"module 'copy': give either '{name}' or 'manifest', not both")
    entries = check_manifest(args["manifest"], parse_mode(args["mode"]))
    uid, gid = resolve_uid(args["owner"]), resolve_gid(args["group"])
    dest = args["dest"]
    if args["delete_extra"]:
        check_delete_extra_dest(dest)
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise ModuleError(f"module 'copy': dest {dest} exists and is not a directory; with a manifest dest is a folder")
    staged = {posixpath.normpath(k): v for k, v in (args["staged"] or {}).items()}
    wanted = {e["path"]: e for e in entries}
    unknown = sorted(set(staged) - set(wanted))
    if unknown:
        raise ModuleError(f"module 'copy': staged path(s) {', '.join(unknown)} are not in the manifest; stage only listed files")
    if staged and args["phase"] == "plan":
        raise ModuleError("module 'copy': 'staged' is for phase install; phase plan only reports what is needed")
    return {
        "entries": entries,
        "uid": uid,
        "gid": gid,
        "dest_real": os.path.realpath(dest),
        "staged": staged,
        "wanted": wanted,
    }


def plan_folder(f: dict, delete_extra: bool) -> tuple:
    """(plan, found): what differs between the manifest and the folder (the `base` of every folder result),
    and what was found at each entry."""
    dest_real, wanted, uid, gid = f["dest_real"], f["wanted"], f["uid"], f["gid"]
    found = {e["path"]: scan_entry(dest_real, e["path"]) for e in f["entries"]} if os.path.isdir(dest_real) else {}
    needed, mode_changes = plan_entries(f["entries"], found)
    owner_changes = [
        p
        for p in wanted
        if p not in needed
        and found.get(p)
        and ((uid is not None and found[p]["uid"] != uid) or (gid is not None and found[p]["gid"] != gid))
    ]
    staged_abs = {os.path.realpath(p) for p in f["staged"].values() if isinstance(p, str)}
    extra = []
    if delete_extra and os.path.isdir(dest_real):
        extra = extra_paths(existing_files(dest_real, staged_abs), list(wanted))
    would_change = bool(needed or mode_changes or owner_changes or extra or not os.path.isdir(dest_real))
    plan = {
        "dest": dest_real,
        "needed": needed,
        "mode_changes": mode_changes,
        "owner_changes": owner_changes,
        "extra": extra,
        "would_change": would_change,
        "files": len(f["entries"]),
    }
    return plan, found


def folder_diff(plan: dict, found: dict, wanted: dict) -> dict:
    needed, mode_changes, extra = plan["needed"], plan["mode_changes"], plan["extra"]
    return {
        "before": {p: (found.get(p) or {}).get("sha256") or "absent" for p in needed + mode_changes}
        | {p: "present" for p in extra},
        "after": {p: wanted[p]["sha256"] for p in needed}
        | {p: f"mode {wanted[p]['mode']:04o}" for p in mode_changes}
        | {p: "absent" for p in extra},
    }


def verify_staged(plan: dict, f: dict) -> None:
    """Every needed file was uploaded, and each upload has the sha256 the manifest gives; else nothing is installed."""
    staged, wanted, needed = f["staged"], f["wanted"], plan["needed"]
    missing = [p for p in needed if p not in staged]
    if missing:
        raise ModuleError(
            f"module 'copy': {len(missing)} file(s) differ on the host but were not staged: "
            f"{', '.join(missing[:10])}; run phase plan, upload each needed file, then install",
            **plan,
        )
    bad = []
    for rel, path in sorted(staged.items()):
        if not isinstance(path, str) or not os.path.isfile(path):
            bad.append(f"{rel} (staged file {path!r} is missing)")
        elif rel in needed and sha256_file(path) != wanted[rel]["sha256"]:
            bad.append(
                f"{rel} (staged file {path} has sha256 {sha256_file(path)[:12]}, manifest says {wanted[rel]['sha256'][:12]})"
            )
    if bad:
        raise ModuleError(
            f"module 'copy': staged upload(s) do not match the manifest: {'; '.join(bad)}; "
            f"nothing was installed; upload them again",
            **plan,
        )


def install_folder(plan: dict, f: dict) -> tuple:
    """(installed, deleted): uploads placed, modes fixed, extra files removed, owners set; unused uploads removed."""
    dest_real, wanted, staged = f["dest_real"], f["wanted"], f["staged"]
    installed, deleted = [], []
    try:
        os.makedirs(dest_real, mode=NEW_DIR_MODE, exist_ok=True)
        for rel in plan["needed"]:
            target = os.path.join(dest_real, *rel.split("/"))
            mode = wanted[rel]["mode"]
            if mode is None:
                mode = NEW_FILE_MODE
            upload = staged.pop(rel)
            shared = upload in staged.values()  # files with equal content may share one upload
            place(upload, target, mode, keep=shared)
            installed.append(rel)
        for rel in plan["mode_changes"]:
            os.chmod(os.path.join(dest_real, *rel.split("/")), wanted[rel]["mode"])
        for rel in plan["extra"]:
            os.unlink(os.path.join(dest_real, *rel.split("/")))
            deleted.append(rel)
        if plan["extra"]:
            keep = {posixpath.dirname(p) for p in wanted}
            keep |= {"/".join(k.split("/")[:i]) for k in list(keep) for i in range(1, k.count("/") + 1)}
            prune_empty_dirs(dest_real, keep)
        if f["uid"] is not None or f["gid"] is not None:
            for rel in wanted:
                ensure_attributes(os.path.join(dest_real, *rel.split("/")), None, f["uid"], f["gid"], False)
    except OSError as exc:
        raise ModuleError(
            f"module 'copy': installing into {dest_real} failed: {exc}; fix permissions and run again",
            installed=installed,
            deleted=deleted,
        )
    finally:
        for leftover in staged.values():  # uploads that were not needed: the content is already there
            if isinstance(leftover, str) and os.path.isfile(leftover):
                os.unlink(leftover)
    return installed, deleted


STAGING = ".dfp-staging"  # the engine's upload folder inside dest (engine/actions.py)
_STAGED_NAME = r"[0-9a-f]{64}"  # compiled (and cached by re) when a staged folder is checked


def remove_stale_staging(dest: str) -> bool:
    """Remove dest/.dfp-staging left by an upload cut short (a kill between upload and install), only when it is
    provably the engine's: a real folder of this user, mode 0700, holding nothing but files named by a sha256."""
    stage = os.path.join(dest, STAGING)
    try:
        st = os.lstat(stage)
    except OSError:
        return False
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        return False
    names = os.listdir(stage)
    if not all(re.fullmatch(_STAGED_NAME, n) and stat.S_ISREG(os.lstat(os.path.join(stage, n)).st_mode) for n in names):
        return False
    for n in names:
        os.unlink(os.path.join(stage, n))
    os.rmdir(stage)
    return True


def run_manifest(args: dict, ctx: Context) -> dict:
    f = folder_args(args)
    plan, found = plan_folder(f, args["delete_extra"])
    dest_real, would_change, files = plan["dest"], plan["would_change"], len(f["entries"])
    summary = (
        f"{len(plan['needed'])} to upload, {len(plan['mode_changes'])} mode change(s), {len(plan['extra'])} extra "
        f"of {files} file(s)"
    )
    diff = folder_diff(plan, found, f["wanted"]) if ctx.diff else None
    if args["phase"] == "plan":
        # it changes nothing; in check mode the plan is the answer, so changed says what would change
        changed = would_change if ctx.check else False
        if not ctx.check and remove_stale_staging(dest_real):
            ctx.warn(f"removed {dest_real}/{STAGING}, left by an upload that was cut short")
        return {**plan, "changed": changed, "msg": f"plan for {dest_real}: {summary}"}
    if ctx.check:
        result = {
            **plan,
            "changed": would_change,
            "msg": f"check mode: {dest_real}: would install {summary}" if would_change else f"{dest_real} is as wanted",
        }
        if diff and would_change:
            result["diff"] = diff
        return result
    verify_staged(plan, f)
    installed, deleted = install_folder(plan, f)
    result = {
        **plan,
        "changed": would_change,
        "installed": installed,
        "deleted": deleted,
        "msg": f"{dest_real}: installed {len(installed)}, mode {len(plan['mode_changes'])}, deleted {len(deleted)} "
        f"of {files} file(s)"
        if would_change
        else f"{dest_real} is as wanted ({files} file(s))",
    }
    if diff and would_change:
        result["diff"] = diff
    return result


def run(args: dict, ctx: Context) -> dict:
    if args["manifest"] is not None:
        return run_manifest(args, ctx)
    return run_file(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
