"""Make, change or remove a local user (ansible.builtin.user on Linux: useradd, usermod, userdel), with its common
options: name, state, uid, group, groups, append, comment, shell, home, create_home, move_home, system, password
(a hash, as Ansible's; never printed), update_password, non_unique, remove, force.

state present: a new user is made by useradd (-m or -M as create_home says, -r for system, -N when a group of its
name exists and no group is given); an existing one gets usermod for what differs (uid, primary group, groups:
exactly those, or with append: added to them; comment, home (-m with move_home), shell, the password hash with
update_password always). state absent: userdel (-r with remove, -f with force). Result as Ansible's: name, state,
uid, group (the gid), comment, home, shell, groups (as given), system and create_home for a new user, append and
move_home for an existing one, force and remove when removed, password as NOT_LOGGING_PASSWORD; stdout and stderr
of the command where they hold something; changed when a command ran (or would, in check mode, where a user to add
or remove answers only changed). tests/library/test_accounts_against_ansible.py runs both (as root).
"""

from __future__ import annotations

import os

from dflash_host.host import accounts
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "name": {"type": "str", "required": True, "help": "the user's name"},
    "user": {"type": "str", "default": None, "alias_of": "name", "help": "alias of name"},
    "state": {"type": "str", "default": "present", "choices": ["absent", "present"], "help": "present or absent"},
    "uid": {"type": "int", "default": None, "help": "the user's id"},
    "group": {"type": "str", "default": None, "help": "the primary group (name or gid; it must exist)"},
    "groups": {"type": "list", "default": None,
               "help": "supplementary groups (each must exist); [] or '' with append false: none"},
    "append": {"type": "bool", "default": False, "help": "add the user to groups, keeping the others"},
    "comment": {"type": "str", "default": None, "help": "the GECOS field"},
    "shell": {"type": "str", "default": None, "help": "the login shell"},
    "home": {"type": "path", "default": None, "help": "the home folder"},
    "create_home": {"type": "bool", "default": True, "help": "make the home folder of a new user (useradd -m)"},
    "createhome": {"type": "bool", "default": None, "alias_of": "create_home", "help": "alias of create_home"},
    "move_home": {"type": "bool", "default": False, "help": "a new home: move the old one's content there"},
    "system": {"type": "bool", "default": False, "help": "a new user is a system user (useradd -r)"},
    "password": {"type": "str", "default": None,
                 "help": "the password hash (as crypt makes it; Ansible's password_hash filter); never printed"},
    "update_password": {"type": "str", "default": "always", "choices": ["always", "on_create"],
                        "help": "always: set the hash where it differs; on_create: only for a new user"},
    "non_unique": {"type": "bool", "default": False, "help": "with uid: allow a uid another user has (-o)"},
    "remove": {"type": "bool", "default": False, "help": "absent: remove the home folder and mail spool too (-r)"},
    "force": {"type": "bool", "default": False, "help": "absent: remove the user even while logged in (-f)"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name", "home", "shell")


HASH_LENGTHS = {"1": 22, "5": 43, "6": 86, "y": 43}  # the hash part's length of each crypt scheme


def looks_hashed(password: str) -> bool:
    """A crypt hash ($id$salt$hash, its hash part of the scheme's length), or a locked/empty marker."""
    if password in ("", "*", "!", "!!", "x"):
        return True
    fields = password.lstrip("!").split("$")
    if len(fields) < 4 or fields[0] != "":
        return False
    length = HASH_LENGTHS.get(fields[1])
    return length is None or len(fields[-1]) == length


def _group_names(args: dict) -> list[str] | None:
    """The supplementary groups as given ('' items dropped), each checked to exist; None when not given."""
    if args["groups"] is None:
        return None
    names = [str(g).strip() for item in args["groups"] for g in str(item).split(",") if str(g).strip()]
    for name in names:
        if accounts.group(name) is None:
            raise ModuleError(f"Group {name} does not exist")
    return names


def _primary(args: dict):
    if args["group"] is None:
        return None
    found = accounts.group(args["group"])
    if found is None:
        raise ModuleError(f"Group {args['group']} does not exist")
    return found


def _useradd(args: dict, name: str, groups: list[str] | None) -> list[str]:
    argv = ["useradd"]
    if args["uid"] is not None:
        argv += ["-u", str(args["uid"]), *(["-o"] if args["non_unique"] else [])]
    if args["group"] is not None:
        argv += ["-g", args["group"]]
    elif accounts.group(name) is not None:
        argv.append("-N")  # a group of the user's name exists: useradd would fail to make it
    if groups:
        primary_gid = accounts.group(args["group"]).gr_gid if args["group"] is not None else None
        argv += ["-G", ",".join(g for g in groups if primary_gid is None or accounts.group(g).gr_gid != primary_gid)]
    for flag, key in (("-c", "comment"), ("-d", "home"), ("-s", "shell"), ("-p", "password")):
        if args[key] is not None:
            argv += [flag, args[key]]
    argv.append("-m" if args["create_home"] else "-M")
    if args["system"]:
        argv.append("-r")
    return [*argv, name]


def _groups_change(args: dict, name: str, groups: list[str]) -> list[str]:
    """usermod's -G (with -a for append) where the membership differs, as Ansible decides it."""
    current = set(accounts.member_of(name))
    wanted = {accounts.group(g).gr_name for g in groups}
    differ = current ^ wanted
    if not groups:
        return ["-G", ""] if current and not args["append"] else []
    if not differ:
        return []
    if args["append"]:
        return ["-a", "-G", ",".join(sorted(wanted))] if wanted & differ else []
    return ["-G", ",".join(sorted(wanted))]


def _usermod(args: dict, name: str, groups: list[str] | None, info) -> list[str]:
    """usermod's argv for what differs from `info` (the user's pwd entry); [] when nothing does."""
    argv = ["usermod"]
    if args["uid"] is not None and info.pw_uid != args["uid"]:
        argv += ["-u", str(args["uid"]), *(["-o"] if args["non_unique"] else [])]
    primary = _primary(args)
    if primary is not None and info.pw_gid != primary.gr_gid:
        argv += ["-g", str(primary.gr_gid)]
    if groups is not None:
        argv += _groups_change(args, name, groups)
    if args["comment"] is not None and info.pw_gecos != args["comment"]:
        argv += ["-c", args["comment"]]
    if args["home"] is not None and info.pw_dir != args["home"]:
        argv += ["-d", args["home"], *(["-m"] if args["move_home"] else [])]
    if args["shell"] is not None and info.pw_shell != args["shell"]:
        argv += ["-s", args["shell"]]
    password = args["password"]
    always = args["update_password"] == "always"  # noqa: S105 - a choice's name
    if always and password is not None and accounts.shadow_hash(name).lstrip("!") != password.lstrip("!"):
        argv += ["-p", password]
    return [*argv, name] if len(argv) > 1 else []


def run(args: dict, ctx: Context) -> dict:
    name = args["name"]
    exists = accounts.user(name) is not None
    if ctx.check and exists == (args["state"] == "absent"):
        return {"changed": True}  # as Ansible's: a user to add or remove answers only that
    result: dict = {"name": name, "state": args["state"]}
    if args["password"] is not None and not looks_hashed(args["password"]):
        ctx.warn("The input password appears not to have been hashed. The 'password' argument must be encrypted for "
                 "this module to work properly.")
    rc, out, err = None, "", ""
    if args["state"] == "absent":
        if exists:
            argv = ["userdel", *(["-f"] if args["force"] else []), *(["-r"] if args["remove"] else []), name]
            rc, out, err = accounts.run(argv, ctx.check)
            result.update(force=args["force"], remove=args["remove"])
    else:
        _primary(args)
        groups = _group_names(args)
        if not exists:
            rc, out, err = accounts.run(_useradd(args, name, groups), ctx.check, args["password"])
            result.update(system=args["system"], create_home=args["create_home"])
        else:
            argv = _usermod(args, name, groups, accounts.user(name))
            if argv:
                rc, out, err = accounts.run(argv, ctx.check, args["password"])
            result.update(append=args["append"], move_home=args["move_home"])
        if args["password"] is not None:
            result["password"] = "NOT_LOGGING_PASSWORD"  # noqa: S105 - Ansible's placeholder
    if rc is not None and rc != 0:
        raise ModuleError(err.strip() or f"{name}: the user command failed (rc {rc})", name=name, rc=rc)
    result["changed"] = rc is not None
    if out:
        result.update(stdout=out, stdout_lines=out.splitlines())
    if err:
        result.update(stderr=err, stderr_lines=err.splitlines())
    info = accounts.user(name) if args["state"] == "present" else None
    if info is not None:
        result.update(uid=info.pw_uid, group=info.pw_gid, comment=info.pw_gecos, home=info.pw_dir,
                      shell=info.pw_shell)
        if args["groups"] is not None:
            result["groups"] = ",".join(str(g) for g in args["groups"])
        if args["create_home"] and not os.path.exists(info.pw_dir) and not ctx.check:
            os.makedirs(info.pw_dir, mode=0o700, exist_ok=True)
            os.chown(info.pw_dir, info.pw_uid, info.pw_gid)
            result["changed"] = True
    return result


if __name__ == "__main__":
    main(ARGS, run)
