"""Start, stop, restart, reload or enable a service (ansible.builtin.service), on a host run by systemd.

As Ansible's service action does on a systemd host, the task runs systemd_service with name, state and enabled
(dflash_host/host/systemd_task.py: the same steps, result and messages); sleep, pattern, arguments and runlevel
are not used there and are ignored with Ansible's warning. `use` auto picks systemd where the host runs it
(/run/systemd/system exists, as Ansible's service_mgr fact decides); a host without systemd (SysV init, OpenRC,
upstart, a container without an init) is refused with a clear message rather than guessed at: name `use:
systemd` only where systemctl does reach a manager there.
"""

from __future__ import annotations

from dflash_host.host import systemd, systemd_task
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "name": {"type": "str", "required": True, "help": "the service (a systemd unit; no suffix: .service)"},
    "state": {"type": "str", "default": None, "choices": ["reloaded", "restarted", "started", "stopped"],
              "help": "started/stopped: only when it is not so already; restarted/reloaded: always"},
    "enabled": {"type": "bool", "default": None, "help": "start it at boot"},
    "sleep": {"type": "int", "default": None, "help": "not used with systemd (ignored, with a warning)"},
    "pattern": {"type": "str", "default": None, "help": "not used with systemd (ignored, with a warning)"},
    "arguments": {"type": "str", "default": "", "help": "not used with systemd (ignored, with a warning)"},
    "args": {"type": "str", "default": None, "alias_of": "arguments", "help": "alias of arguments"},
    "runlevel": {"type": "str", "default": "default", "help": "not used with systemd (ignored, with a warning)"},
    "use": {"type": "str", "default": "auto",
            "help": "the service manager: auto (systemd where the host runs it) or systemd; others are refused"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name",)
UNUSED = ("sleep", "pattern", "arguments", "runlevel")


def manager(use: str) -> str:
    if use == "auto":
        if systemd.present():
            return "systemd"
        raise ModuleError("service: this host does not run systemd (no /run/systemd/system), and this tool's service "
                          "module manages systemd units only; run the service's own start command with the command "
                          "module, or use: systemd where systemctl does reach a manager on this host")
    if use != "systemd":
        raise ModuleError(f"service: use {use!r} is not supported here (only auto or systemd: this tool manages "
                          "systemd units); run the service's own commands with the command module instead")
    return use


def run(args: dict, ctx: Context) -> dict:
    if args["state"] is None and args["enabled"] is None:
        raise ModuleError("one of the following is required: state, enabled")
    used = manager(args["use"])
    for name in UNUSED:
        given = args[name]
        if given not in (None, "", "default"):
            ctx.warn(f'Ignoring "{name}" as it is not used in "{used}"')
    unit_args = {"name": args["name"], "state": args["state"], "enabled": args["enabled"], "force": None,
                 "masked": None, "daemon_reload": False, "daemon_reexec": False, "scope": "system", "no_block": False}
    return systemd_task.run(unit_args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
