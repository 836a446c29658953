"""Read a file on the host and return it base64-encoded (ansible.builtin.slurp): `content`, `encoding`, `source`.

What a playbook registers from it is the host's data: `content | b64decode` may be shown, compared or written back to
a host, but never chooses code, a file or a delegate for the control node (engine/run/trust.py). Changes nothing;
runs in check mode too. Failures carry Ansible's words ("File not found", "File is not readable", "Source is a
directory and must be a file"). Where it differs on purpose: a file larger than 64 MiB is refused (the whole file
travels in one answer, held in memory on both ends); read a large file with another tool.
"""

from __future__ import annotations

import base64
import errno
import os

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "src": {"type": "path", "default": None, "help": "the file on the host to read (required: src or its alias path)"},
    "path": {"type": "path", "default": None, "alias_of": "src", "help": "alias of src"},
}
# The arguments that decide what runs or which file, folder or address is touched.
CODE_ARGS = ("src", "path")
MAX_BYTES = 64 * 1024 * 1024
_WORDS = {errno.ENOENT: "File not found", errno.EACCES: "File is not readable",
          errno.EISDIR: "Source is a directory and must be a file"}


def _read(source: str) -> bytes:
    """The file's bytes, at most MAX_BYTES (one read past the limit tells a larger file)."""
    with open(source, "rb") as fh:
        if os.fstat(fh.fileno()).st_size > MAX_BYTES:
            raise ModuleError(f"slurp: {source} is larger than {MAX_BYTES // 2**20} MiB, the most one answer carries; "
                              "read it with command (head, sha256sum) or fetch it another way")
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ModuleError(f"slurp: {source} grew past {MAX_BYTES // 2**20} MiB while it was read; nothing returned")
    return data


def run(args: dict, ctx: Context) -> dict:
    source = args["src"]
    if not source:
        raise ModuleError("missing required arguments: src")
    try:
        data = _read(source)
    except OSError as exc:
        words = _WORDS.get(exc.errno or 0, "Unable to slurp file")
        raise ModuleError(f"{words}: {source}", exception=f"{type(exc).__name__}: {exc}") from None
    return {"content": base64.b64encode(data).decode("ascii"), "source": source, "encoding": "base64",
            "changed": False}


if __name__ == "__main__":
    main(ARGS, run)
