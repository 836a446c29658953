"""Answer `ping: pong` (ansible.builtin.ping): the host is reached and a module runs there.

`data` is returned as `ping`; data `crash` makes the module fail, as Ansible's raises an exception (here a failure
whose msg says so, with `exception` set). Changes nothing; runs in check mode too.
"""

from __future__ import annotations

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "data": {"type": "str", "default": "pong", "help": "what to answer as `ping`; crash: fail on purpose"},
}
# The arguments that decide what runs or which file, folder or address is touched: none.
CODE_ARGS = ()


def run(args: dict, ctx: Context) -> dict:
    if args["data"] == "crash":
        raise ModuleError("boom: ping was asked to crash (data: crash)", exception="Exception: boom")
    return {"ping": args["data"], "changed": False}


if __name__ == "__main__":
    main(ARGS, run)
