"""A folder's files by manifest, for copy's folder mode: which files differ, and putting uploads in place.

A manifest lists files by relative path, sha256 and mode. `check_manifest` validates it (no path leaves
dest), `scan_entry` describes what the host has at an entry (never following a symlink out of dest),
`plan_entries` and `extra_paths` say what must be uploaded, re-moded or removed, and `place` moves a
verified upload into place atomically. Used by library/copy.py; standard library only.
"""

from __future__ import annotations

import errno
import hashlib
import os
import posixpath

from dflash_host.host.fileattrs import octal_mode
from dflash_host.host.files import atomic_write
from dflash_host.host.paths import managed_path
from dflash_host.module import ModuleError

NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
        mode = _entry_mode(entry.get("mode"), where)
        out.append({"path": path, "sha256": sha.lower(), "mode": default_mode if mode is None else mode})
    return out


def _entry_mode(value, where: str) -> int | None:
    """An entry's mode: an int as it is (0 to 0o7777), else an octal string through octal_mode; None stays None."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= 0o7777:
            raise ModuleError(f"{where}: mode {value} is out of range")
        return value
    if value is None:
        return None
    try:
        return octal_mode(value)
    except ModuleError as exc:
        raise ModuleError(f"{where}: {exc.msg}")


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


def scan_entry(dest_real: str, rel: str) -> dict | None:
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


def existing_files(dest_real: str, skip: set) -> list[str]:
    out = []
    for root, dirs, files in os.walk(dest_real):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            full = os.path.join(root, name)
            if full not in skip:
                out.append(os.path.relpath(full, dest_real).replace(os.sep, "/"))
    return out


def prune_empty_dirs(dest_real: str, keep: set) -> None:
    for root, _dirs, _files in os.walk(dest_real, topdown=False):
        rel = os.path.relpath(root, dest_real).replace(os.sep, "/")
        if root != dest_real and rel not in keep and not os.listdir(root):
            os.rmdir(root)


def _read_upload(path: str) -> bytes:
    """A staged upload's bytes (verified to exist; vanished since, it is an OSError the install reports)."""
    with open(path, "rb") as fh:
        return fh.read()


def place(staged: str, target: str, mode: int, keep: bool = False) -> None:
    """Move a verified upload into place atomically (copy through atomic_write across filesystems).

    keep: copy instead of moving, because another manifest path uses the same upload (same content).
    """
    os.makedirs(os.path.dirname(target), mode=NEW_DIR_MODE, exist_ok=True)
    if keep:
        atomic_write(target, _read_upload(staged), mode)
        return
    with open(staged, "rb") as fh:
        os.fsync(fh.fileno())
    os.chmod(staged, mode)
    try:
        os.replace(staged, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        atomic_write(target, _read_upload(staged), mode)
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
