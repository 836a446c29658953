"""The ssh config lookups of earlier runs, kept in the user's cache (`~/.cache/dflash-provision/ssh-lookups/`).

A lookup's answer depends on the host name, the config text (the run's own options come first in it), the
local user, home and host name (paramiko's %u, %d, %l tokens) and paramiko's version: all of them are in the
key. Configs with `Match` or `CanonicalizeHostname` are never kept: their answer can depend on commands run,
DNS, or more than the text says. Best effort: an unreadable cache costs only the lookup.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import importlib.util
import json
import os
import re
import socket
import threading

from engine.cache import CACHE, write_atomically

FOLDER = CACHE / "ssh-lookups"  # one small file per lookup: a run reads only its own hosts' answers
_NOT_KEPT = re.compile(r"^\s*(match|canonicalizehostname)\b", re.IGNORECASE | re.MULTILINE)
_lock = threading.Lock()
_new: dict = {}


def key_of(name: str, text: str) -> str | None:
    """The key of a lookup, or None when its answer must not be kept."""
    version = _paramiko_and_host()
    if version is None or _NOT_KEPT.search(text):
        return None
    local = f"{os.path.expanduser('~')}\0{os.environ.get('USER') or os.environ.get('LOGNAME') or os.getuid()}"
    parts = "\0".join((version, local, name, text))
    return hashlib.sha256(parts.encode("utf-8", "surrogateescape")).hexdigest()[:40]


@functools.cache  # once per run, not per host: neither changes while a run lasts (home and user may: not here)
def _paramiko_and_host() -> str | None:
    """paramiko's version (its file's path, time and size) and this host's name; None when paramiko cannot be
    found (nothing is kept then)."""
    spec = importlib.util.find_spec("paramiko")
    origin = spec.origin if spec and spec.origin else ""
    try:
        st = os.stat(origin)
    except OSError:
        return None
    return f"{origin}:{st.st_mtime_ns}:{st.st_size}\0{socket.gethostname()}"


def get(key: str | None) -> dict | None:
    if key is None:
        return None
    try:
        found = json.loads((FOLDER / f"{key}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def put(key: str | None, result: dict) -> None:
    """Remember a lookup's answer; written when the run ends (a run's lookups are its start's critical path): by
    the runner (engine/run/runner.py), else at the process's exit."""
    if key is None or not all(isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v))
                              for v in result.values()):
        return
    with _lock:
        if not _new:
            atexit.register(flush)
        _new[key] = result


def flush() -> None:
    with _lock:
        entries = dict(_new)
        _new.clear()
    if not entries:
        return
    try:
        FOLDER.mkdir(parents=True, exist_ok=True, mode=0o700)
        for key, result in entries.items():
            write_atomically(str(FOLDER / f"{key}.json"), json.dumps(result).encode("utf-8"), 0o600)
    except OSError:
        pass
