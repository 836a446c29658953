"""The control node's own files, below every stage: the user's cache folder and the one way a file is written whole.

Every stage may import this (as engine.errors): the module argument tables, the ssh config lookups, the runtime and
the reports all keep files here or write them atomically.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (3 ms of the resident client's start)
if TYPE_CHECKING:
    from pathlib import Path


def cache_dir() -> str:
    """The tool's cache folder: $XDG_CACHE_HOME/dflash-provision, else ~/.cache/dflash-provision."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                        "dflash-provision")


def __getattr__(name: str) -> Path:
    """CACHE, the same folder as a Path, made when first imported: pathlib is not imported with this module, whose
    cache_dir() the resident control node's client uses before anything heavy (dfp_cli/ansible_playbook/client.py)."""
    if name == "CACHE":
        from pathlib import Path

        return Path(cache_dir())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def write_atomically(path: str, data: bytes, mode: int | None = None) -> None:
    """The whole file or none: a temp file beside it, renamed over it (a full disk leaves no empty report).
    `mode`: the new file's permissions from its creation on (else the umask's)."""
    from pathlib import Path

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
