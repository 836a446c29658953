"""File attributes as Ansible's `attributes` option and stat's get_attributes read and set them: lsattr and chattr
(e2fsprogs) when the host has them; a host without them, or a filesystem that has none, reads as no attributes."""

from __future__ import annotations

import os
import shutil
import subprocess

from dflash_host.module import ModuleError

# lsattr's letters under Ansible's names (its stat's `attributes` list)
NAMES = {"A": "noatime", "a": "append", "c": "compressed", "C": "nocow", "d": "nodump", "D": "dirsync",
         "e": "extents", "E": "encrypted", "h": "blocksize", "i": "immutable", "I": "indexed", "j": "journalled",
         "N": "inline", "s": "zero", "S": "synchronous", "t": "notail", "T": "blockroot", "u": "undelete",
         "X": "compressedraw", "Z": "compresseddirty"}
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")  # looked in besides PATH, as Ansible's get_bin_path


def program(name: str) -> str | None:
    """The program's path: PATH, then the sbin folders."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", os.defpath), *SBIN]))


def read(path: str, with_version: bool = True) -> dict:
    """{"version", "attr_flags", "attributes"} from `lsattr -vd` (the letters without dashes); {} when lsattr is
    missing or fails (a filesystem without attributes)."""
    lsattr = program("lsattr")
    if lsattr is None:
        return {}
    try:
        proc = subprocess.run([lsattr, "-vd" if with_version else "-d", "--", path], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) < (2 if with_version else 1):
        return {}
    flags = words[1 if with_version else 0].replace("-", "")
    out: dict = {"attr_flags": flags, "attributes": [NAMES[f] for f in flags if f in NAMES]}
    if with_version:
        out["version"] = words[0]
    return out


def ensure(path: str, wanted: str | None, check: bool, diff: dict | None = None) -> bool:
    """Ansible's attributes option: `wanted` as chattr takes it ("+i", "-a", "=A" or "A" for exactly those); True
    when chattr runs (or would, in check mode): the flags differ, or a removal is asked. A missing path in check
    mode would change."""
    if not wanted:
        return False
    if check and not os.path.lexists(path):
        return True
    current = read(path, with_version=False).get("attr_flags", "")
    op, letters = (wanted[0], wanted[1:]) if wanted[0] in "+-=" else ("=", wanted)
    if not letters or (current == letters and op != "-"):
        return False
    chattr = program("chattr")
    if chattr is None:
        return False  # as Ansible: no chattr, nothing done
    if diff is not None:
        diff.setdefault("before", {})["attributes"] = current
        diff.setdefault("after", {})["attributes"] = op + letters
    if not check:
        proc = subprocess.run([chattr, op + letters, "--", path], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0 or proc.stderr:
            raise ModuleError(f"chattr failed: chattr {op + letters} {path}: {(proc.stdout + proc.stderr).strip()}; "
                              "the filesystem may not support that attribute, or this user may not set it",
                              path=path, details=(proc.stdout + proc.stderr).strip())
    return True
