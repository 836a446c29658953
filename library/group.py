"""Make or remove a local group (ansible.builtin.group on Linux: groupadd, groupmod, groupdel).

state present: the group exists, with `gid` when given (groupmod -g when it differs; `non_unique` lets a gid be
shared), `system` (groupadd -r) for a new one; absent: groupdel (`force`: -f, a user's primary group removed too).
Result as Ansible's: name, state, and for a present group gid and system; changed when a command ran (or would, in
check mode). tests/library/test_accounts_against_ansible.py runs both (as root).
"""

from __future__ import annotations

from dflash_host.host import accounts
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "name": {"type": "str", "required": True, "help": "the group's name"},
    "state": {"type": "str", "default": "present", "choices": ["absent", "present"], "help": "present or absent"},
    "gid": {"type": "int", "default": None, "help": "the group's id (none: the system picks one for a new group)"},
    "system": {"type": "bool", "default": False, "help": "a new group is a system group (groupadd -r)"},
    "non_unique": {"type": "bool", "default": False, "help": "with gid: allow a gid another group has (-o)"},
    "force": {"type": "bool", "default": False, "help": "absent: remove it even when it is a user's primary group"},
    "local": {"type": "bool", "default": False, "choices": [False],
              "help": "Ansible's lgroupadd route: not taken here (only false)"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name",)


def _fail(name: str, rc: int, err: str) -> ModuleError:
    return ModuleError(err.strip() or f"the group command for {name} failed (rc {rc})", name=name, rc=rc)


def run(args: dict, ctx: Context) -> dict:
    name, gid = args["name"], args["gid"]
    current = accounts.group(name) if not name.isdigit() else None
    result: dict = {"name": name, "state": args["state"]}
    rc, out, err = None, "", ""
    if ctx.check and (current is not None) == (args["state"] == "absent"):
        return {"changed": True}  # as Ansible's: a group to add or remove answers only that
    if args["state"] == "absent":
        if current is not None:
            rc, out, err = accounts.run(["groupdel", *(["-f"] if args["force"] else []), name], ctx.check)
    elif current is None:
        argv = ["groupadd", *(["-g", str(gid)] if gid is not None else []),
                *(["-o"] if gid is not None and args["non_unique"] else []), *(["-r"] if args["system"] else []), name]
        rc, out, err = accounts.run(argv, ctx.check)
    elif gid is not None and current.gr_gid != gid:
        rc, out, err = accounts.run(["groupmod", "-g", str(gid), *(["-o"] if args["non_unique"] else []), name],
                                    ctx.check)
    if rc is not None and rc != 0:
        raise _fail(name, rc, err)
    result["changed"] = rc is not None
    if out:
        result.update(stdout=out, stdout_lines=out.splitlines())
    if err:
        result.update(stderr=err, stderr_lines=err.splitlines())
    if args["state"] == "present":
        now = accounts.group(name)
        result.update(system=args["system"], gid=now.gr_gid if now is not None else gid)
    return result


if __name__ == "__main__":
    main(ARGS, run)
