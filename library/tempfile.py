"""Make a new temporary file or folder on the host and return its path (ansible.builtin.tempfile).

state file (mkstemp: mode 0600) or directory (mkdtemp: mode 0700), in `path` (none: the host's temp folder,
TMPDIR's), named prefix + random + suffix; always changed. prefix and suffix must be file name parts (no "/").
As Ansible's (it does not support check mode), the task is skipped in check mode.
"""

from __future__ import annotations

import os
import tempfile

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "state": {"type": "str", "default": "file", "choices": ["file", "directory"],
              "help": "what to make: a file (0600) or a directory (0700)"},
    "path": {"type": "path", "default": None, "help": "the folder to make it in (none: the host's temp folder)"},
    "prefix": {"type": "str", "default": "ansible.", "help": "the start of its name"},
    "suffix": {"type": "str", "default": "", "help": "the end of its name"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("path",)


def run(args: dict, ctx: Context) -> dict:
    if ctx.check:
        return {"skipped": True, "changed": False, "msg": "remote module (tempfile) does not support check mode"}
    prefix, suffix = args["prefix"], args["suffix"]
    for name, value in (("prefix", prefix), ("suffix", suffix)):
        if value and value != os.path.basename(value):
            raise ModuleError(f"{name} must be a valid file name component, got {value!r}")
    try:
        if args["state"] == "file":
            handle, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=args["path"])
            os.close(handle)
        else:
            path = tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=args["path"])
    except OSError as exc:
        raise ModuleError(f"{exc}; give a path that exists and that this user may write in") from None
    return {"changed": True, "path": path, "msg": f"made {path}"}


if __name__ == "__main__":
    main(ARGS, run)
