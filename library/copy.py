"""Ensure a file has the given content, mode and owner; or a folder holds a given set of files.

One file: `content` (text) or `content_b64` (bytes), written atomically, only when its sha256 differs.
A folder (the engine drives this for `src:` on the control node): `manifest` lists the files by path,
sha256 and mode; phase `plan` says which files the host lacks, the engine uploads those to temp
files, and phase `install` checks each upload's sha256 and renames it into place.

| argument | type | default | meaning |
|---|---|---|---|
| dest | path | required | the file (or, with manifest, the folder) on the host; a symlink is followed |
| content | str | none | the file's text (UTF-8) |
| content_b64 | str | none | the file's bytes, base64 |
| mode | str | none | octal string such as "0640" (new files get 0644; manifest: default for entries) |
| owner | str | none | user name or uid |
| group | str | none | group name or gid |
| backup | bool | false | keep a timestamped copy of a file whose content is replaced |
| manifest | list | none | folder mode: [{"path": "a/b.txt", "sha256": "...", "mode": "0644"}, ...] |
| phase | str | plan | folder mode: plan (changes nothing, returns `needed`) or install |
| staged | dict | {} | folder mode, install: {relative path: host path of the uploaded temp file} |
| delete_extra | bool | false | folder mode: remove files under dest that the manifest does not list |

Folder mode results: `needed` (paths whose content differs or is missing), `mode_changes`,
`owner_changes`, `extra` (with delete_extra), `would_change`; install adds `installed`, `deleted`.
Plan is changed=false, except in check mode where it reports `would_change` (the plan is then the
answer). Install in check mode needs no uploads. The engine should run install whenever the plan
says `would_change` (a mode fix or an extra file needs no upload). Staged files are consumed (moved
into place, or removed when not needed); paths with equal content may share one upload. Put them on
dest's filesystem so the rename is atomic. Parent folders missing on the host are created (0755).
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import posixpath

from dflash_host.files import atomic_write, ensure_attributes, parse_mode, read_bytes, resolve_gid, resolve_uid
from dflash_host.module import Context, ModuleError, main
from dflash_host.paths import managed_path

ARGS = {
    "dest": {"type": "path", "required": True},
    "content": {"type": "str", "default": None},
    "content_b64": {"type": "str", "default": None},
    "mode": {"type": "str", "default": None},
    "owner": {"type": "str", "default": None},
    "group": {"type": "str", "default": None},
    "backup": {"type": "bool", "default": False},
    "manifest": {"type": "list", "default": None},
    "phase": {"type": "str", "default": "plan", "choices": ["plan", "install"]},
    "staged": {"type": "dict", "default": None},
    "delete_extra": {"type": "bool", "default": False},
}

DIFF_TEXT_LIMIT = 256 * 1024  # larger contents show as a summary in the diff
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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


def run_file(args: dict, ctx: Context) -> dict:
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
        data = args["content"].encode("utf-8")
    else:
        try:
            data = base64.b64decode(args["content_b64"], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ModuleError(f"module 'copy': content_b64 is not valid base64 ({exc}); encode the bytes with base64")
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


def check_manifest(manifest: list, default_mode: int | None) -> list[dict]:
    """Validated entries: {"path" (normalised, relative), "sha256" (lowercase hex), "mode" (int or None)}."""
    out, seen = [], set()
    for i, entry in enumerate(manifest):
        where = f"module 'copy': manifest[{i}]"
        if not isinstance(entry, dict) or "path" not in entry or "sha256" not in entry:
            raise ModuleError(f"{where} must be a mapping with 'path' and 'sha256' (and optional 'mode'), got {entry!r}")
        extra = sorted(set(entry) - {"path", "sha256", "mode"})
        if extra:
            raise ModuleError(f"{where} has unknown key(s) {', '.join(extra)}; allowed: path, sha256, mode")
        raw = entry["path"]
        if not isinstance(raw, str) or not raw or raw.startswith("/"):
            raise ModuleError(f"{where}: path {raw!r} must be a non-empty path relative to dest")
        path = posixpath.normpath(raw)
        if path == "." or path == ".." or path.startswith("../"):
            raise ModuleError(f"{where}: path {raw!r} leaves dest; give a path inside it")
        if path in seen:
            raise ModuleError(f"{where}: path {path!r} is listed twice; list each file once")
        seen.add(path)
        sha = entry["sha256"]
        if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha.lower()):
            raise ModuleError(f"{where}: sha256 {sha!r} is not 64 hex digits")
        mode = entry.get("mode")
        if isinstance(mode, int) and not isinstance(mode, bool):
            if not 0 <= mode <= 0o7777:
                raise ModuleError(f"{where}: mode {mode} is out of range")
        elif mode is not None:
            try:
                mode = parse_mode(mode)
            except ModuleError as exc:
                raise ModuleError(f"{where}: {exc.msg}")
        out.append({"path": path, "sha256": sha.lower(), "mode": default_mode if mode is None else mode})
    return out


def plan_entries(entries: list[dict], found: dict) -> tuple[list[str], list[str]]:
    """From the wanted entries and what was found ({path: {"sha256", "mode"} or None}): (needed, mode_changes).

    needed: content missing or different (must be uploaded). mode_changes: content equal, mode differs.
    """
    needed, mode_changes = [], []
    for e in entries:
        have = found.get(e["path"])
        if have is None or have["sha256"] != e["sha256"]:
            needed.append(e["path"])
        elif e["mode"] is not None and have["mode"] != e["mode"]:
            mode_changes.append(e["path"])
    return needed, mode_changes


def extra_paths(existing: list[str], wanted: list[str]) -> list[str]:
    """Files found under dest that the manifest does not list."""
    return sorted(set(existing) - set(wanted))


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _scan_entry(dest_real: str, rel: str) -> dict | None:
    target = os.path.join(dest_real, *rel.split("/"))
    if not _inside(dest_real, os.path.realpath(os.path.dirname(target))):
        raise ModuleError(
            f"module 'copy': {rel} would be written outside {dest_real} (a folder on its way is a "
            f"symlink leading elsewhere); remove that symlink or change the manifest"
        )
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise ModuleError(f"module 'copy': a file sits where a folder on the way to {target} should be; move it away")
    if os.path.isdir(target) and not os.path.islink(target):
        raise ModuleError(f"module 'copy': {target} is a directory but the manifest lists it as a file; move it away")
    if not os.path.isfile(target) or os.path.islink(target):
        return {"sha256": "", "mode": None, "uid": None, "gid": None}  # a symlink or special file: replace it
    return {"sha256": sha256_file(target), "mode": st.st_mode & 0o7777, "uid": st.st_uid, "gid": st.st_gid}


def _existing_files(dest_real: str, skip: set) -> list[str]:
    out = []
    for root, dirs, files in os.walk(dest_real):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            if full not in skip:
                out.append(os.path.relpath(full, dest_real).replace(os.sep, "/"))
    return out


def _prune_empty_dirs(dest_real: str, keep: set) -> None:
    for root, _dirs, _files in os.walk(dest_real, topdown=False):
        rel = os.path.relpath(root, dest_real).replace(os.sep, "/")
        if root != dest_real and rel not in keep and not os.listdir(root):
            os.rmdir(root)


def _place(staged: str, target: str, mode: int, keep: bool = False) -> None:
    """Move a verified upload into place atomically (copy through atomic_write across filesystems).

    keep: copy instead of moving, because another manifest path uses the same upload (same content).
    """
    os.makedirs(os.path.dirname(target), mode=NEW_DIR_MODE, exist_ok=True)
    if keep:
        atomic_write(target, read_bytes(staged), mode)
        return
    with open(staged, "rb") as fh:
        os.fsync(fh.fileno())
    os.chmod(staged, mode)
    try:
        os.replace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        atomic_write(target, read_bytes(staged), mode)
        os.unlink(staged)


def check_delete_extra_dest(dest: str) -> None:
    """delete_extra removes (and chmods) what it finds under dest: only in a folder plausibly the tool's.

    Checked before the plan, so `/`, a home or system folder, a relative path or one with `..` (also
    through a symlink) fails in check mode and in phase plan, with nothing changed.
    """
    try:
        managed_path(dest, "dest")
    except ModuleError as exc:
        raise ModuleError(
            f"module 'copy': delete_extra refused, nothing was changed: {exc.msg} (delete_extra removes every "
            "file under dest that the manifest does not list; drop it, or give dest a folder of its own)"
        ) from None


def run_manifest(args: dict, ctx: Context) -> dict:
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
    dest_real = os.path.realpath(dest)
    staged = {posixpath.normpath(k): v for k, v in (args["staged"] or {}).items()}
    wanted = {e["path"]: e for e in entries}
    unknown = sorted(set(staged) - set(wanted))
    if unknown:
        raise ModuleError(f"module 'copy': staged path(s) {', '.join(unknown)} are not in the manifest; stage only listed files")
    if staged and args["phase"] == "plan":
        raise ModuleError("module 'copy': 'staged' is for phase install; phase plan only reports what is needed")

    found = {e["path"]: _scan_entry(dest_real, e["path"]) for e in entries} if os.path.isdir(dest_real) else {}
    needed, mode_changes = plan_entries(entries, found)
    owner_changes = [
        p
        for p in wanted
        if p not in needed
        and found.get(p)
        and ((uid is not None and found[p]["uid"] != uid) or (gid is not None and found[p]["gid"] != gid))
    ]
    staged_abs = {os.path.realpath(p) for p in staged.values() if isinstance(p, str)}
    extra = []
    if args["delete_extra"] and os.path.isdir(dest_real):
        extra = extra_paths(_existing_files(dest_real, staged_abs), list(wanted))
    would_change = bool(needed or mode_changes or owner_changes or extra or not os.path.isdir(dest_real))
    base = {
        "dest": dest_real,
        "needed": needed,
        "mode_changes": mode_changes,
        "owner_changes": owner_changes,
        "extra": extra,
        "would_change": would_change,
        "files": len(entries),
    }
    summary = f"{len(needed)} to upload, {len(mode_changes)} mode change(s), {len(extra)} extra of {len(entries)} file(s)"
    diff = None
    if ctx.diff:
        diff = {
            "before": {p: (found.get(p) or {}).get("sha256") or "absent" for p in needed + mode_changes}
            | {p: "present" for p in extra},
            "after": {p: wanted[p]["sha256"] for p in needed}
            | {p: f"mode {wanted[p]['mode']:04o}" for p in mode_changes}
            | {p: "absent" for p in extra},
        }

    if args["phase"] == "plan":
        # it changes nothing; in check mode the plan is the answer, so changed says what would change
        changed = would_change if ctx.check else False
        return {**base, "changed": changed, "msg": f"plan for {dest_real}: {summary}"}

    # phase install
    if ctx.check:
        result = {
            **base,
            "changed": would_change,
            "msg": f"check mode: {dest_real}: would install {summary}" if would_change else f"{dest_real} is as wanted",
        }
        if diff and would_change:
            result["diff"] = diff
        return result
    missing = [p for p in needed if p not in staged]
    if missing:
        raise ModuleError(
            f"module 'copy': {len(missing)} file(s) differ on the host but were not staged: "
            f"{', '.join(missing[:10])}; run phase plan, upload each needed file, then install",
            **base,
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
            **base,
        )
    installed, deleted = [], []
    try:
        os.makedirs(dest_real, mode=NEW_DIR_MODE, exist_ok=True)
        for rel in needed:
            target = os.path.join(dest_real, *rel.split("/"))
            mode = wanted[rel]["mode"]
            if mode is None:
                mode = NEW_FILE_MODE
            upload = staged.pop(rel)
            shared = upload in staged.values()  # files with equal content may share one upload
            _place(upload, target, mode, keep=shared)
            installed.append(rel)
        for rel in mode_changes:
            os.chmod(os.path.join(dest_real, *rel.split("/")), wanted[rel]["mode"])
        for rel in extra:
            os.unlink(os.path.join(dest_real, *rel.split("/")))
            deleted.append(rel)
        if extra:
            keep = {posixpath.dirname(p) for p in wanted}
            keep |= {"/".join(k.split("/")[:i]) for k in list(keep) for i in range(1, k.count("/") + 1)}
            _prune_empty_dirs(dest_real, keep)
        if uid is not None or gid is not None:
            for rel in wanted:
                ensure_attributes(os.path.join(dest_real, *rel.split("/")), None, uid, gid, False)
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
    changed = would_change
    result = {
        **base,
        "changed": changed,
        "installed": installed,
        "deleted": deleted,
        "msg": f"{dest_real}: installed {len(installed)}, mode {len(mode_changes)}, deleted {len(deleted)} "
        f"of {len(entries)} file(s)"
        if changed
        else f"{dest_real} is as wanted ({len(entries)} file(s))",
    }
    if diff and changed:
        result["diff"] = diff
    return result


def run(args: dict, ctx: Context) -> dict:
    if args["manifest"] is not None:
        return run_manifest(args, ctx)
    return run_file(args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
