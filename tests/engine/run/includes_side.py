"""Running one of ansible-core's include_import playbooks (copied from its integration target, or written by a
test) with real ansible-playbook and with ours on local hosts (testhost, testhost2): the exit code and each host's
recap, for the tests that compare the two."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from engine.api import run_playbook
from tests.ansible_targets.source import targets_dir
from tests.helpers import required_ansible_tool

HOSTS = ("testhost", "testhost2")
COUNTS = ("ok", "changed", "failed", "skipped", "rescued", "ignored")


# the target's inventory's host variables (include_import/inventory)
HOST_VARS = {"testhost": {"host_var_role_name": "role3"}, "testhost2": {"host_var_role_name": "role2"}}


def inventory(hosts: tuple[str, ...] = HOSTS) -> dict:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {"all": {"hosts": {h: {**local, **HOST_VARS.get(h, {})} for h in hosts}}}


def write_inventory(folder: Path, hosts: tuple[str, ...]) -> Path:
    lines = [f"{h} ansible_connection=local ansible_python_interpreter={sys.executable} "
             + " ".join(f"{k}={v}" for k, v in HOST_VARS.get(h, {}).items()) for h in hosts]
    path = folder / "dfp-inventory"
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible(playbook: Path, hosts: tuple[str, ...], args: tuple[str, ...] = (), roles: Path | None = None
            ) -> tuple[int, dict, str]:
    """(exit code, {host: counts}, output) of real ansible-playbook (`roles`: its ANSIBLE_ROLES_PATH)."""
    roles = roles or playbook.parent / "roles"
    inv = write_inventory(playbook.parent, hosts)
    env = {"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(playbook.parent),
           "ANSIBLE_LOCAL_TEMP": str(playbook.parent / ".ansible-tmp"), "ANSIBLE_DEPRECATION_WARNINGS": "0",
           "ANSIBLE_ROLES_PATH": str(roles)}
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), *args, str(playbook)],
                          capture_output=True, text=True, timeout=300, cwd=playbook.parent, env=env)
    recap = proc.stdout.rpartition("PLAY RECAP")[2]
    counts = {}
    for host in hosts:
        found = re.search(rf"^{host}\s*:\s*(.*)$", recap, re.M)
        if found:
            got = dict(re.findall(r"(\w+)=(\d+)", found.group(1)))
            counts[host] = {k: int(got.get(k, 0)) for k in COUNTS}
    return proc.returncode, counts, proc.stdout + proc.stderr


def ours(playbook: Path, hosts: tuple[str, ...], tags: tuple[str, ...] = (), extra_vars: dict | None = None
         ) -> tuple[int, dict, str]:
    res = run_playbook(str(playbook), inventory=inventory(hosts), tags=set(tags) or None, extra_vars=extra_vars)
    counts = {h: {k: int(res.recap[h][k]) for k in COUNTS} for h in hosts if h in res.recap}
    failures = [f"{r.host} {r.task}: {r.msg}" for r in res.results if r.status == "failed"]
    return res.exit_code, counts, f"{res.error or ''}\n" + "\n".join(failures)


def copy_target(tmp: Path, target: str = "include_import") -> Path:
    """A copy of an integration target's folder (each tool gets its own, beside the other)."""
    dest = tmp / target
    shutil.copytree(targets_dir() / target, dest)
    return dest


def same_as_ansible(folder: Path, playbook: str, hosts: tuple[str, ...] = ("testhost",),
                    tags: tuple[str, ...] = (), extra_vars: dict | None = None) -> tuple[int, dict]:
    """Both tools on copies of `folder` (with --tags, -e); their exit codes (0 or not) and recaps asserted equal."""
    copies = {}
    for tool in ("ansible", "ours"):
        copies[tool] = folder.parent / f"{folder.name}-{tool}"
        shutil.copytree(folder, copies[tool])
    args = tuple(a for t in tags for a in ("--tags", t)) + (("-e", json.dumps(extra_vars)) if extra_vars else ())
    code_a, theirs, out_a = ansible(copies["ansible"] / playbook, hosts, args, copies["ansible"] / "roles")
    code_o, mine, out_o = ours(copies["ours"] / playbook, hosts, tags, extra_vars)
    assert (code_o == 0, mine) == (code_a == 0, theirs), f"ansible-playbook: {code_a} {theirs}\n{out_a[-3000:]}\n" \
                                                         f"ours: {code_o} {mine}\n{out_o[-3000:]}"
    return code_o, mine
