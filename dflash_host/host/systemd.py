"""The one systemctl wrapper: every call the tool makes to systemd goes through here.

Which manager: always the SYSTEM manager, `--user` is never added. The only unit the tool installs is
the vLLM server's, and vllm_server writes it into vllm_unit_dir (/etc/systemd/system by default, a
system unit folder), runs `systemctl daemon-reload` and `enable` for it, and picks systemd mode on its
own only as root (vllm_unit.choose_mode). A `--user` call made by another user would ask a different
manager, find no such unit and silently leave the real one running; so a non-root caller asks the
system manager too, where `show` works for anyone and `stop` fails with systemd's own "access denied",
which the ModuleError turns into the fix (run the play as root, become: true).

Unit names always follow `--`, so a name can never be read as an option; every call has a timeout.
Standard library only.
"""

from __future__ import annotations

import os
import subprocess

from dflash_host.module import ModuleError

TIMEOUT_S = 120.0  # a call that takes longer is reported, never waited on forever
STOP_TIMEOUT_S = 90.0  # `stop` waits for the unit's TimeoutStopSec (60 s in the tool's unit) and SIGKILL
ACTIVE_STATES = ("active", "activating", "reloading", "deactivating")  # the unit still holds processes
RUNNING_STATES = ("active", "activating", "reloading")  # the unit runs its service (not on its way out)


def present() -> bool:
    """Whether systemd is PID 1 here (its runtime folder exists only then)."""
    return os.path.isdir("/run/systemd/system")


def systemctl(argv: list, check: bool = True, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """`systemctl ARGV` on the system manager: text output; a ModuleError when it cannot run, runs past
    `timeout`, or (with check) exits non-zero. Callers put `--` before unit names (or use the helpers below)."""
    cmd = ["systemctl"] + [str(a) for a in argv]
    shown = " ".join(cmd)
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except FileNotFoundError:
        raise ModuleError(f"'{shown}' failed: systemctl is not installed on this host; set vllm_use_systemd: false") from None
    except subprocess.TimeoutExpired:
        raise ModuleError(
            f"'{shown}' did not answer within {timeout:g} s; check the unit with `systemctl status` and `journalctl -xe`"
        ) from None
    except OSError as exc:
        raise ModuleError(f"'{shown}' could not run: {exc.strerror or exc}; check systemctl on this host") from None
    if check and res.returncode != 0:
        raise ModuleError(f"'{shown}' failed ({res.returncode}): {_why(res)}{_hint(res)}")
    return res


def unit_command(verb: str, unit: str, check: bool = True, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """`systemctl VERB -- UNIT` (start, stop, restart, enable, disable, status ...)."""
    return systemctl([verb, "--", _unit_name(unit)], check=check, timeout=timeout)


def stop(unit: str, grace_s: float = 0.0) -> subprocess.CompletedProcess:
    """`systemctl stop -- UNIT`, given time for the unit's stop timeout plus `grace_s`."""
    return unit_command("stop", unit, timeout=max(STOP_TIMEOUT_S, grace_s + 30.0))


def show(unit: str, props: tuple = ("LoadState", "ActiveState", "MainPID"), check: bool = True) -> dict:
    """{property: value} from `systemctl show -p A,B -- UNIT`. A unit systemd does not know reads as
    LoadState=not-found (systemd's own answer); a failing call is a ModuleError (with check), else
    whatever it printed."""
    res = systemctl(["show", "-p", ",".join(props), "--", _unit_name(unit)], check=False)
    if check and res.returncode != 0:
        raise ModuleError(f"'systemctl show -- {unit}' failed ({res.returncode}): {_why(res)}{_hint(res)}")
    out = {}
    for line in res.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def main_pid(props: dict) -> int:
    """The MainPID property as a number (0: none)."""
    try:
        return int(props.get("MainPID") or 0)
    except ValueError:
        return 0


def cgroup_pids(cgroup: str) -> list[int]:
    """PIDs in a unit's cgroup (the ControlGroup property; v2, else v1's systemd hierarchy): systemd put
    them there, so they are the unit's. Empty when the unit has no cgroup (not running)."""
    if not cgroup:
        return []
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/systemd"):
        try:
            with open(f"{root}{cgroup}/cgroup.procs") as fh:
                return [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            continue
    return []


def _unit_name(unit: str) -> str:
    if not isinstance(unit, str) or not unit.strip() or any(c in unit for c in "\n\r\x00"):
        raise ModuleError(f"systemd unit name {unit!r} is empty or not one line; fix vllm_service_name")
    return unit


def _why(res: subprocess.CompletedProcess) -> str:
    return ((res.stderr or "").strip() or (res.stdout or "").strip() or "no output")[:300]


def _hint(res: subprocess.CompletedProcess) -> str:
    text = f"{res.stderr or ''} {res.stdout or ''}".lower()
    if os.geteuid() != 0 and ("access denied" in text or "authentication" in text or "permission" in text):
        return "; the tool's unit is a system unit: run the play as root (become: true) or set vllm_use_systemd: false"
    return "; check `systemctl status` and `journalctl -u` for the unit"


def run_systemctl(prefix: list, argv: list, timeout: float = TIMEOUT_S) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of `systemctl PREFIX ARGV` (prefix: --user, --no-block, --force as the task asks), for
    the modules named as Ansible's (library/systemd_service.py), which read systemd's answers as Ansible's does
    rather than failing on the first non-zero exit. A systemctl that is missing or hangs is a ModuleError."""
    cmd = ["systemctl", *prefix, *[str(a) for a in argv]]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
                             stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ModuleError("Failed to find required executable \"systemctl\" in paths: "
                          f"{os.environ.get('PATH', '')}; this host has no systemd tools (use another module, or "
                          "install systemd)") from None
    except subprocess.TimeoutExpired:
        raise ModuleError(f"'{' '.join(cmd)}' did not answer within {timeout:g} s; check the unit with "
                          "`systemctl status` and `journalctl -xe`") from None
    except OSError as exc:
        raise ModuleError(f"'{' '.join(cmd)}' could not run: {exc.strerror or exc}; check systemctl on this host") from None
    return res.returncode, res.stdout, res.stderr


def parse_show(text: str) -> dict:
    """`systemctl show`'s KEY=VALUE lines as a dict; an Exec* value in braces may span lines (only those do,
    as Ansible reads them: a Description starting with `{` stays one line)."""
    parsed: dict = {}
    key, pending = None, []
    for line in text.split("\n"):
        if key is None:
            if "=" not in line:
                continue
            name, value = line.split("=", 1)
            if name.startswith("Exec") and value.lstrip().startswith("{") and not value.rstrip().endswith("}"):
                key, pending = name, [value]
                continue
            parsed[name] = value.strip()
        else:
            pending.append(line)
            if line.rstrip().endswith("}"):
                parsed[key] = "\n".join(pending).strip()
                key, pending = None, []
    return parsed
