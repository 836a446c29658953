"""A stand-in for systemctl, for tests on a machine without a running systemd (this one: PID 1 is no systemd).

An outer-boundary stand-in only: it answers the calls systemd_service makes (show, is-enabled [-l],
list-unit-files, start, stop, restart, reload, enable, disable, mask, unmask, daemon-reload, daemon-reexec, no
verb) from a JSON state file named by FAKE_SYSTEMCTL_STATE ({"units": {NAME: {"active", "enabled"}}}), with
systemd's own words for a unit it does not know, and appends each call to that file's "calls". Both Ansible's
module and ours reach it through PATH (the task's environment), so both are asked the same questions.
Options (--user, --no-block, --force, --) are recorded and otherwise ignored.
"""

from __future__ import annotations

import json
import os
import sys

STATE = os.environ["FAKE_SYSTEMCTL_STATE"]


def unit_name(name: str) -> str:
    return name if "." in name else name + ".service"


def show(units: dict, name: str) -> int:
    unit = units.get(unit_name(name))
    if unit is None:
        print(f"Id={unit_name(name)}\nNames={unit_name(name)}\nLoadState=not-found\nActiveState=inactive\n"
              "SubState=dead\nLoadError=org.freedesktop.systemd1.NoSuchUnit \"Unit x not found.\"\nMainPID=0")
        return 0
    load = "masked" if unit["enabled"] == "masked" else "loaded"
    print(f"Id={unit_name(name)}\nNames={unit_name(name)}\nDescription={{weird description\nLoadState={load}\n"
          f"ActiveState={unit['active']}\nSubState={'running' if unit['active'] == 'active' else 'dead'}\n"
          f"UnitFileState={unit['enabled']}\nMainPID={4242 if unit['active'] == 'active' else 0}\n"
          "ExecStart={ path=/bin/sleep ; argv[]=/bin/sleep infinity ;\n ignore_errors=no ; pid=0 ; code=(null) }\n"
          "Restart=no")
    return 0


def main(argv: list[str]) -> int:
    with open(STATE) as fh:
        state = json.load(fh)
    state.setdefault("calls", []).append(argv)
    words = [a for a in argv if not a.startswith("-")]
    verb, names = (words[0], words[1:]) if words else ("", [])
    units = state["units"]
    rc = 0
    name = names[0] if names else ""
    unit = units.get(unit_name(name)) if name else None
    if verb == "show":
        rc = show(units, name)
    elif verb == "is-enabled":
        if unit is None:
            print(f"Failed to get unit file state for {unit_name(name)}: No such file or directory", file=sys.stderr)
            rc = 1
        else:
            print(unit["enabled"])
            rc = 0 if unit["enabled"] in ("enabled", "static", "enabled-runtime") else 1
    elif verb == "list-unit-files":
        rc = 0 if unit is not None else 1
    elif verb in ("start", "stop", "restart", "reload", "enable", "disable", "mask", "unmask"):
        if unit is None and verb not in ("mask", "unmask"):
            print(f"Failed to {verb} {unit_name(name)}: Unit {unit_name(name)} not found.", file=sys.stderr)
            rc = 5
        elif verb in ("start", "restart", "reload"):
            if unit["enabled"] == "masked":
                print(f"Failed to {verb} {unit_name(name)}: Unit {unit_name(name)} is masked.", file=sys.stderr)
                rc = 1
            else:
                unit["active"] = "active"
        elif verb == "stop":
            unit["active"] = "inactive"
        elif verb in ("enable", "disable"):
            unit["enabled"] = verb + "d"
        elif verb == "mask":
            units.setdefault(unit_name(name), {"active": "inactive", "enabled": "disabled"})["enabled"] = "masked"
        elif unit is not None:
            unit["enabled"] = "disabled"
    elif verb in ("daemon-reload", "daemon-reexec", ""):
        state[verb or "list"] = state.get(verb or "list", 0) + 1
    else:
        print(f"Unknown command verb {verb}.", file=sys.stderr)
        rc = 1
    with open(STATE, "w") as fh:
        json.dump(state, fh)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
