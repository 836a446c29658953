"""The runner of a playbook's own Ansible module (`library/NAME.py` beside the playbook or in a role): never named
in a task. The engine sends the module's name, source and the task's arguments (engine/playbook/user_modules.py);
dflash_host/ansible_modules.py runs it as Ansible does, in a python process of its own."""

from __future__ import annotations

from dflash_host.ansible_modules import run_module
from dflash_host.module import Context, main

ARGS = {
    "name": {"type": "str", "required": True, "help": "the module's name (its file's stem)"},
    "source": {"type": "str", "required": True, "help": "the module's source, read from the playbook's folders"},
    "params": {"type": "dict", "default": {}, "help": "the task's arguments"},
}
# The module itself is code, and what it does with its arguments is unknown: every one decides what runs.
CODE_ARGS = ("name", "source", "params")


def run(args: dict, ctx: Context) -> dict:
    return run_module(args["name"], args["source"], args["params"] or {}, ctx.check, ctx.diff)


if __name__ == "__main__":
    main(ARGS, run)
