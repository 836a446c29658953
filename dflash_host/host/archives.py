"""Tar (plain, gz, bz2, xz) and zip archives for the unarchive task: their members, whether dest holds them
already, and their extraction, with the standard library's tarfile and zipfile (no tar or unzip program needed).

Members are read once into Member records (name as it lands under dest, after --strip-components; kind; mode;
mtime; size; link target), include/exclude applied as Ansible's (fnmatch on the name). A member whose path would
leave dest (absolute after stripping, '..' out of it), a symlink pointing out of dest, a hard link to a path
outside the archive's, or a device node is refused before anything is written: an archive is data. "Already
there" is gtar --diff's rule: every member exists with its kind; a file with its size, content and mtime (whole
seconds; zip's 2 s); a symlink with its target; a mode (none given) and, as root, an owner (none given) as the
member's. Standard library only.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import shutil
import stat
import tarfile
import time
import zipfile

from dflash_host.module import ModuleError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from collections.abc import Iterator
    from typing import Any

# Ansible's handler names, by compression: GNU tar finds it from a name's suffix itself (then Ansible's first tar
# handler, TarArchive, takes the file); a file without such a suffix is taken by the handler of its compression
TAR_HANDLERS = {"": "TarArchive", "gz": "TgzArchive", "bz2": "TarBzipArchive", "xz": "TarXzArchive"}
TAR_SUFFIXES = (".tar", ".tgz", ".taz", ".tar.gz", ".tbz", ".tbz2", ".tz2", ".tar.bz2", ".txz", ".tar.xz")
CHUNK = 1 << 20


class Member:
    """One archive member as it lands under dest."""

    def __init__(self, name: str, kind: str, mode: int, mtime: float, size: int, link: str = "",
                 uid: int = -1, gid: int = -1, source: Any = None) -> None:
        self.name, self.kind, self.mode, self.mtime, self.size = name, kind, mode, mtime, size
        self.link, self.uid, self.gid, self.source = link, uid, gid, source


def open_archive(path: str) -> tuple[str, Any]:
    """(Ansible's handler name, the open archive) or a ModuleError naming what the file is not."""
    if zipfile.is_zipfile(path):
        try:
            return "ZipArchive", zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ModuleError(f"Failed to find handler for \"{path}\": it looks like a zip file but cannot be read "
                              f"({exc})") from None
    for compression, handler in TAR_HANDLERS.items():
        try:
            archive = tarfile.open(path, f"r:{compression}")  # type: ignore[call-overload]  # one of r:, r:gz, r:bz2, r:xz
        except (tarfile.TarError, OSError, EOFError):
            continue
        return ("TarArchive" if path.endswith(TAR_SUFFIXES) else handler), archive
    raise ModuleError(f"Failed to find handler for \"{path}\". Make sure the required command to extract the file is "
                      "installed.\nUnable to read it as a zip file or a tar file (plain, gzip, bzip2 or xz); give an "
                      "archive of one of these kinds")


def strip(name: str, components: int) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return "/".join(parts[components:])


def _tar_members(tar: tarfile.TarFile, components: int) -> Iterator[Member]:
    for info in tar.getmembers():
        name = strip(info.name, components)
        if not name:
            yield Member("", "none", 0, 0.0, 0)  # listed as gtar lists it (an empty name), never written
            continue
        if info.isdir():
            kind = "dir"
        elif info.issym():
            kind = "link"
        elif info.islnk():
            kind = "hard"
        elif info.isfile():
            kind = "file"
        else:
            raise ModuleError(f"archive member {info.name!r} is a device, fifo or other special file; this tool "
                              "extracts files, folders and links only (rebuild the archive without it)")
        link = strip(info.linkname, components) if kind == "hard" else info.linkname
        yield Member(name, kind, info.mode & 0o7777, float(info.mtime), info.size, link, info.uid, info.gid, info)


def _zip_members(zf: zipfile.ZipFile, components: int) -> Iterator[Member]:
    for info in zf.infolist():
        name = strip(info.filename, components)
        if not name:
            continue
        unix = info.external_attr >> 16
        is_link = stat.S_ISLNK(unix)
        kind = "dir" if info.is_dir() else "link" if is_link else "file"
        mode = stat.S_IMODE(unix) or (0o755 if kind == "dir" else 0o644)
        mtime = time.mktime((*info.date_time, 0, 0, -1))
        link = zf.read(info).decode("utf-8", "surrogateescape") if is_link else ""
        yield Member(name, kind, mode, mtime, info.file_size, link, source=info)


def members(archive: Any, components: int, include: list, exclude: list) -> list[Member]:
    """The members that land under dest, in the archive's order, include/exclude applied as Ansible's."""
    read = _zip_members if isinstance(archive, zipfile.ZipFile) else _tar_members
    out = []
    excludes = [p.rstrip("/") for p in exclude]
    for member in read(archive, components):
        if excludes and any(fnmatch.fnmatch(member.name, p) for p in excludes):
            continue
        if include and not any(fnmatch.fnmatch(member.name, p) or member.name.rstrip("/") == p.rstrip("/")
                               for p in include):
            continue
        out.append(member)
    return out


def check_safe(found: list[Member], dest: str) -> None:
    """Refuse a member that would land, or point, outside dest."""
    names = {m.name for m in found}
    for m in found:
        if m.kind == "none":
            continue
        if os.path.isabs(m.name) or ".." in m.name.split("/"):
            raise ModuleError(f"archive member {m.name!r} would be written outside {dest}; refused (an archive's "
                              "paths must stay inside dest: rebuild it with relative paths)")
        if m.kind == "link":
            target = posixpath.normpath(posixpath.join(posixpath.dirname(m.name), m.link))
            if os.path.isabs(m.link) or target == ".." or target.startswith("../"):
                raise ModuleError(f"archive member {m.name!r} is a symlink to {m.link!r}, outside {dest}; refused "
                                  "(links must point inside the archive's folder)")
        if m.kind == "hard" and m.link not in names:
            raise ModuleError(f"archive member {m.name!r} is a hard link to {m.link!r}, which is not one of the "
                              "archive's own files; refused")


def _same_content(path: str, archive: Any, m: Member) -> bool:
    with open(path, "rb") as have, _open_member(archive, m) as want:
        while True:
            a, b = have.read(CHUNK), want.read(CHUNK)
            if a != b:
                return False
            if not a:
                return True


def _open_member(archive: Any, m: Member) -> Any:
    if isinstance(archive, zipfile.ZipFile):
        return archive.open(m.source)
    handle = archive.extractfile(m.source)
    if handle is None:
        raise ModuleError(f"archive member {m.name!r} cannot be read")
    return handle


def wanted_mode(m: Member, mode_given: bool) -> int | None:
    """The mode extraction gives a member: its own as root (gtar -p), less the umask otherwise."""
    if mode_given or m.kind == "link":
        return None
    if os.geteuid() == 0:
        return m.mode
    umask = os.umask(0)
    os.umask(umask)
    return m.mode & ~umask


def differs(m: Member, dest: str, archive: Any, attrs: dict) -> str | None:
    """Why dest does not hold member m as gtar --diff sees it (None: it does)."""
    if m.kind == "none":
        return None
    path = os.path.join(dest, m.name)
    try:
        st = os.lstat(path)
    except OSError:
        return "missing"
    if m.kind == "dir":
        return None if stat.S_ISDIR(st.st_mode) else "type"
    if m.kind == "link":
        return None if stat.S_ISLNK(st.st_mode) and os.readlink(path) == m.link else "symlink"
    if not stat.S_ISREG(st.st_mode):
        return "type"
    size = os.path.getsize(os.path.join(dest, m.link)) if m.kind == "hard" else m.size
    if st.st_size != size:
        return "size"
    if m.kind == "file" and int(st.st_mtime) != int(m.mtime) and abs(st.st_mtime - m.mtime) >= (
            2 if isinstance(archive, zipfile.ZipFile) else 1):
        return "mtime"
    mode = wanted_mode(m, attrs.get("mode") is not None)
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        return "mode"
    if os.geteuid() == 0 and m.uid >= 0 and attrs.get("owner") is None and st.st_uid != m.uid:
        return "owner"
    if os.geteuid() == 0 and m.gid >= 0 and attrs.get("group") is None and st.st_gid != m.gid:
        return "group"
    if m.kind == "file" and not _same_content(path, archive, m):
        return "content"
    return None


def extract(archive: Any, found: list[Member], dest: str, keep_newer: bool) -> list[str]:
    """Every member written under dest (what is in the way replaced); the names written. Folders' times last."""
    written, folders = [], []
    for m in found:
        if m.kind == "none":
            continue
        path = os.path.join(dest, m.name)
        if keep_newer and m.kind != "dir" and os.path.lexists(path) and os.lstat(path).st_mtime > m.mtime:
            continue
        os.makedirs(os.path.dirname(path) or dest, exist_ok=True)
        if m.kind == "dir":
            if os.path.lexists(path) and not os.path.isdir(path):
                os.unlink(path)
            os.makedirs(path, exist_ok=True)
            folders.append(m)
        else:
            _place(archive, m, path, dest)
        written.append(m.name)
    for m in reversed(folders):
        _finish(m, os.path.join(dest, m.name))
    return written


def _place(archive: Any, m: Member, path: str, dest: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    tmp = f"{path}.dfp-unarchive-{os.getpid()}"
    if m.kind == "link":
        os.symlink(m.link, tmp)
    elif m.kind == "hard":
        os.link(os.path.join(dest, m.link), tmp)
    else:
        with _open_member(archive, m) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out, CHUNK)
    os.replace(tmp, path)
    if m.kind != "hard":
        _finish(m, path)


def _finish(m: Member, path: str) -> None:
    """Owner (as root), mode and mtime as the member's, as gtar extracts them."""
    is_link = m.kind == "link"
    if os.geteuid() == 0 and m.uid >= 0:
        os.lchown(path, m.uid, m.gid)
    mode = wanted_mode(m, False)
    if mode is not None:
        os.chmod(path, mode)
    if not is_link:
        os.utime(path, (m.mtime, m.mtime))
    else:
        os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)
