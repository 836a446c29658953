"""The systemd_service task (library/systemd_service.py, its alias library/systemd.py, and library/service.py on a
systemd host): Ansible's steps and answers, written once here because a task module cannot import another.

daemon_reload / daemon_reexec first (not in check mode), then the unit's `systemctl show` read into `status`;
masked (mask/unmask), enabled (enable/disable, after `is-enabled -l`), state (started: start when not
active/activating; stopped: stop when active, activating or deactivating; restarted/reloaded: always, a unit not
running is started) each only where it differs, in that order; check mode says what would change and runs none of
it. Every systemctl call goes through dflash_host/host/systemd.py (run_systemctl), unit names after `--`.
Standard library only.
"""

from __future__ import annotations

import os

from dflash_host.host import systemd
from dflash_host.module import ModuleError

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only
    from dflash_host.module import Context

ENABLED_STATES = ("enabled", "enabled-runtime", "linked", "linked-runtime", "masked", "masked-runtime", "static",
                  "indirect", "disabled", "generated", "transient")


class Systemctl:
    """systemctl with the task's manager and flags; each call's (rc, stdout, stderr)."""

    def __init__(self, args: dict) -> None:
        self.prefix = ([f"--{args['scope']}"] if args["scope"] != "system" else []) + \
            (["--no-block"] if args["no_block"] else []) + (["--force"] if args["force"] else [])

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        return systemd.run_systemctl(self.prefix, list(argv))

    def unit(self, verb: str, unit: str, *more: str) -> tuple[int, str, str]:
        return self(verb, *more, "--", unit)


def offline() -> bool:
    """A chroot, or SYSTEMD_OFFLINE=1: Ansible goes on (with a warning) where systemctl cannot reach a manager."""
    if os.environ.get("SYSTEMD_OFFLINE") == "1":
        return True
    try:
        root, init_root = os.stat("/"), os.stat("/proc/1/root/.")
    except OSError:
        return False
    return (root.st_ino, root.st_dev) != (init_root.st_ino, init_root.st_dev)


def check_args(args: dict) -> str | None:
    unit = args["name"]
    # Ansible's required_one_of (state, enabled, masked, daemon_reload, daemon_reexec) never fails: it counts
    # daemon_reload's default; a task naming only a unit reads its status, as there.
    for asked in ("state", "enabled", "masked"):
        if args[asked] is not None and unit is None:
            raise ModuleError(f"missing parameter(s) required by '{asked}': name")
    for pattern in ("*", "?", "["):
        if unit is not None and pattern in unit:
            raise ModuleError("This module does not currently support using glob patterns, found "
                              f"'{pattern}' in service name: {unit}")
    return unit


def daemon_step(ctl: Systemctl, verb: str, ctx: Context) -> None:
    if ctx.check:
        return
    rc, _out, err = ctl(verb)
    if rc == 0:
        return
    if offline():
        ctx.warn(f"{verb} failed, but target is a chroot or systemd is offline. Continuing. Error was: {rc} / {err}")
        return
    raise ModuleError(f"failure {rc} during {verb}: {err}")


def sysv_script(unit: str) -> bool:
    return os.path.exists(f"/etc/init.d/{unit}")


def read_unit(ctl: Systemctl, unit: str, result: dict) -> bool:
    """Whether systemd (or an init script) knows the unit; result["status"] filled from `systemctl show`."""
    rc, out, err = ctl.unit("show", unit)
    ignored = any("=" not in text and ("ignoring request" in text or "ignoring command" in text) for text in (out, err))
    found = False
    if rc == 0 and not ignored:
        if out:
            result["status"] = systemd.parse_show(out)
            load = result["status"].get("LoadState")
            found = load is not None and load != "not-found"
            if found and load != "masked" and "LoadError" in result["status"]:
                raise ModuleError(f"Error loading unit file '{unit}': {result['status']['LoadError']}")
    else:
        rc, out, err = ctl.unit("is-enabled", unit)
        if out.strip() in ENABLED_STATES:
            found = True
        elif ctl.unit("list-unit-files", unit)[0] == 0:
            found = True
        else:
            rc, out, err = ctl()
            if rc != 0:
                raise ModuleError(err.strip() or out.strip() or f"systemctl failed (rc {rc})", rc=rc, stdout=out,
                                  stderr=err)
    return found


def require_found(found: bool, unit: str) -> None:
    if not found:
        raise ModuleError(f"Could not find the requested service {unit}: host")


def set_masked(ctl: Systemctl, unit: str, want: bool, found: bool, result: dict, ctx: Context) -> None:
    masked = ctl.unit("is-enabled", unit)[1].strip() == "masked"
    if masked == want:
        return
    result["changed"] = True
    action = "mask" if want else "unmask"
    if not ctx.check:
        rc, _out, err = ctl.unit(action, unit)
        if rc != 0:
            require_found(found, unit)
            raise ModuleError(f"Failed to {action} the service ({unit}): {err.strip()}")


def set_enabled(ctl: Systemctl, unit: str, want: bool, found: bool, args: dict, result: dict, ctx: Context) -> None:
    require_found(found, unit)
    rc, out, _err = ctl.unit("is-enabled", unit, "-l")
    if rc == 0:
        enabled = out.rstrip() not in ("enabled-runtime", "indirect", "alias")
    else:
        enabled = (rc == 1 and args["scope"] == "system" and sysv_script(unit) and not out.strip().endswith("disabled")
                   and sysv_enabled(unit))
    result["enabled"] = enabled
    if enabled == want:
        return
    result["changed"] = True
    action = "enable" if want else "disable"
    if not ctx.check:
        rc, out, err = ctl.unit(action, unit)
        if rc != 0:
            raise ModuleError(f"Unable to {action} service {unit}: {out + err}")
    result["enabled"] = not enabled


def sysv_enabled(unit: str) -> bool:
    import glob
    return bool(glob.glob(f"/etc/rc?.d/S??{unit}"))


def state_action(want: str, active: str) -> str | None:
    """The systemctl verb that brings a unit in ActiveState `active` to `want` (None: it is there)."""
    running = active in ("active", "activating")
    if want == "started":
        return None if running else "start"
    if want == "stopped":
        return "stop" if running or active == "deactivating" else None
    return want[:-2] if running else "start"  # restarted/reloaded: restart/reload, or start one not running


def set_state(ctl: Systemctl, unit: str, want: str, found: bool, result: dict, ctx: Context) -> None:
    require_found(found, unit)
    result["state"] = want if want in ("started", "stopped") else "started"
    if "ActiveState" not in result["status"]:
        if offline():
            ctx.warn("Target is a chroot or systemd is offline. This can lead to false positives or prevent the init "
                     "system tools from working.")
            result["state"] = want
            return
        raise ModuleError("Service is in unknown state", status=result["status"])
    action = state_action(want, result["status"]["ActiveState"])
    if action is None:
        return
    result["changed"] = True
    if not ctx.check:
        rc, _out, err = ctl.unit(action, unit)
        if rc != 0:
            raise ModuleError(f"Unable to {action} service {unit}: {err}")


def run(args: dict, ctx: Context) -> dict:
    unit = check_args(args)
    ctl = Systemctl(args)
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/run/user/{os.geteuid()}")
    result: dict = {"name": unit, "changed": False, "status": {}}
    if args["daemon_reload"]:
        daemon_step(ctl, "daemon-reload", ctx)
    if args["daemon_reexec"]:
        daemon_step(ctl, "daemon-reexec", ctx)
    if unit is None:
        return result
    in_systemd, initd = read_unit(ctl, unit, result), sysv_script(unit)
    if initd and not in_systemd:
        ctx.warn(f"The service ({unit}) is actually an init script but the system is managed by systemd")
    found = in_systemd or initd
    if args["masked"] is not None:
        set_masked(ctl, unit, args["masked"], found, result, ctx)
    if args["enabled"] is not None:
        set_enabled(ctl, unit, args["enabled"], found, args, result, ctx)
    if args["state"] is not None:
        set_state(ctl, unit, args["state"], found, result, ctx)
    return result

