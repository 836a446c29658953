"""copy with remote_src and a folder as src (Ansible's copy module's folder case): src's tree merged into a folder
on the same host. A missing destination is copied whole (times and modes kept); an existing one gets the files
whose content differs or that it lacks, and src's subfolders are merged the same way. Nothing is ever removed.
`follow` is Ansible's local_follow: true copies what a symlink points to, false makes the same link, not given
(None) keeps links in a folder copied whole (Ansible's module default). Standard
library only (it runs on the host)."""

from __future__ import annotations

import filecmp
import os
import shutil
from collections.abc import Callable


def tree_destination(src: str, dest: str) -> str:
    """The folder src's content goes to: dest itself for `src/` (its content), dest/NAME for `src` (the folder)."""
    if src.endswith("/"):
        return dest
    return os.path.join(dest, os.path.basename(src.rstrip("/")))


def copy_tree(src: str, dest: str, follow: bool | None, check: bool, chown: Callable[[str], bool]) -> bool:
    """src's tree merged into dest (created when missing); chown(path) sets the owner of each path copied or
    found. True when anything changed (or would, in check mode)."""
    if not os.path.exists(dest):
        if not check:
            shutil.copytree(src, dest, symlinks=not follow)
            _chown_all(dest, chown)
        return True
    changed = _merge(src, dest, follow, check, chown)
    return _chown_all(dest, chown) or changed


def _merge(src: str, dest: str, follow: bool | None, check: bool, chown: Callable[[str], bool]) -> bool:
    """One folder level: differing files replaced, src-only entries copied, common subfolders merged."""
    cmp = filecmp.dircmp(src, dest)
    changed = bool(cmp.diff_files or cmp.left_only)
    if not check:
        for name in cmp.diff_files:
            _copy_entry(os.path.join(src, name), os.path.join(dest, name), follow, chown, replace=True)
        for name in cmp.left_only:
            _copy_entry(os.path.join(src, name), os.path.join(dest, name), follow, chown, replace=False)
    for name in cmp.common_dirs:
        changed = _merge(os.path.join(src, name), os.path.join(dest, name), follow, check, chown) or changed
    return changed


def _copy_entry(src: str, dest: str, follow: bool | None, chown: Callable[[str], bool], replace: bool) -> None:
    """One file, link or folder of src at dest, as Ansible's copy_diff_files (replace) and copy_left_only do: a
    link is made again with follow false, copied as what it points to with true; not given (None), a differing
    one is copied as its target and a new one is left out, as is a new dangling link whatever follow says."""
    if os.path.islink(src) and (follow is False if replace else not os.path.exists(src) or follow is not True):
        if follow is not False or not os.path.exists(src):
            return
        if replace and os.path.lexists(dest):
            os.unlink(dest)
        os.symlink(os.readlink(src), dest)
    elif os.path.isdir(src):
        shutil.copytree(src, dest, symlinks=not follow)
        _chown_all(dest, chown)
        return
    else:
        shutil.copyfile(src, dest)
        if not os.path.islink(src):
            shutil.copymode(src, dest)
    chown(dest)


def _chown_all(top: str, chown: Callable[[str], bool]) -> bool:
    """chown on top and everything under it; True when any owner changed."""
    changed = chown(top)
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            changed = chown(os.path.join(folder, name)) or changed
    return changed
