"""What a copy of a control-node folder sends, as Ansible's copy action walks it: its files, its folders (empty ones
included) and the symlinks it keeps as links. `src/` sends the folder's content, `src` the folder itself (under
dest/NAME); local_follow (the default) copies what a symlink points to, except a link back to a folder being walked,
which stays a link (as a broken one does)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SourceTree:
    """A folder's entries by path relative to the folder they are copied into."""

    files: list[tuple[Path, str]] = field(default_factory=list)  # (control-node file, relative path)
    directories: list[str] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)  # (link target as written, relative path)


def destination_folder(src: str, dest: str) -> str:
    """The folder on the host the tree goes to: dest for `src/`, dest/NAME for `src` (Ansible's rsync-like rule)."""
    if src.endswith("/"):
        return dest
    return f"{dest.rstrip('/')}/{os.path.basename(src.rstrip('/'))}"


def walk_source(top: Path, local_follow: bool) -> SourceTree:
    """The tree under `top` (sorted, so that a run sends the same manifest every time)."""
    tree = SourceTree()
    _walk(top, "", frozenset({_key(top)}), local_follow, tree)
    return tree


def _key(path: Path | str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _is_dir(entry: os.DirEntry) -> bool:
    """A folder, or a link to one; a link that loops on itself (ELOOP) or leads nowhere is no folder."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _walk(folder: Path, rel: str, chain: frozenset, follow: bool, tree: SourceTree) -> None:
    """One folder: its files and links noted, its subfolders (and, with follow, linked ones) walked; `chain` holds
    the folders from the top down to this one, which a link may not lead back into. A folder's files come before
    its subfolders' (os.walk's order, which Ansible's walk follows: the first file that fails is the same)."""
    entries = sorted(os.scandir(folder), key=lambda e: e.name)
    for entry in [e for e in entries if not _is_dir(e)]:
        _note_file(entry, f"{rel}{entry.name}", follow, tree)
    for entry in [e for e in entries if _is_dir(e)]:
        path, name = Path(entry.path), f"{rel}{entry.name}"
        if entry.is_symlink() and (not follow or _key(path) in chain):
            tree.symlinks.append((os.readlink(path), name))
            continue
        tree.directories.append(name)
        real = Path(os.path.realpath(path)) if entry.is_symlink() else path
        _walk(real, f"{name}/", chain | {_key(path)}, follow, tree)


def _note_file(entry: os.DirEntry, name: str, follow: bool, tree: SourceTree) -> None:
    """A file, or a link that is no folder: with follow, a link to a file is that file; else it stays a link."""
    path = Path(entry.path)
    if entry.is_symlink():
        target = os.path.realpath(path)
        if follow and os.path.isfile(target):
            tree.files.append((Path(target), name))
        else:
            tree.symlinks.append((os.readlink(path), name))
    else:
        tree.files.append((path, name))
