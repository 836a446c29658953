"""The control node's own files, below every stage: the user's cache folder and the one way a file is written whole.

Every stage may import this (as engine.errors): the module argument tables, the ssh config lookups, the runtime and
the reports all keep files here or write them atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dflash-provision"


def write_atomically(path: str, data: bytes, mode: int | None = None) -> None:
    """The whole file or none: a temp file beside it, renamed over it (a full disk leaves no empty report).
    `mode`: the new file's permissions from its creation on (else the umask's)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if mode is None:
            tmp.write_bytes(data)
        else:
            tmp.unlink(missing_ok=True)
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb") as fh:
                fh.write(data)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
