"""debug as ansible-core 2.19 runs it, compared with real ansible-playbook: `var` of a name or an expression (a
filter, arithmetic, an attribute), of something undefined (Ansible 2.19's "<< error 1 - ... >>" in its place and a
warning, not a failure), the default message, `verbosity` above the run's (skipped), msg and var together (failed).
The same playbook for both tools registers each result and writes them out as JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

CASES = {
    "undefined": {"var": "nope"},
    "missing_attribute": {"var": "d.missing"},
    "undefined_attribute": {"var": "nope.x"},
    "filter": {"var": "l | length"},
    "arithmetic": {"var": "d.a + 1"},
    "mapping": {"var": "d"},
    "facts_not_gathered": {"var": "ansible_facts"},
    "default_msg": {},
    "msg": {"msg": "hi {{ d.a }}"},
    "above_verbosity": {"msg": "hi", "verbosity": 1},
    "both": {"msg": "hi", "var": "d"},
}


def playbook(out: Path) -> list:
    tasks = [{"name": name, "debug": args, "register": name, "ignore_errors": True} for name, args in CASES.items()]
    every = "{{ {" + ", ".join(f"'{n}': {n}" for n in CASES) + "} | to_json }}"
    tasks.append({"copy": {"content": every, "dest": str(out / "debug.json")}})
    return [{"hosts": "all", "gather_facts": False, "vars": {"d": {"a": 1}, "l": [1, 2]}, "tasks": tasks}]


def kept(name: str, result: dict) -> dict:
    """What both tools must agree on: Ansible's fields (ours adds a display `msg` to a var result and to a skipped
    one, and a timing; Ansible a placeholder traceback to a failure)."""
    drop = {"_duration_s", "exception"} | ({"msg"} if "var" in CASES[name] or name == "above_verbosity" else set())
    out = {k: v for k, v in result.items() if k not in drop and not k.startswith("_ansible")}
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict]:
    tool = required_ansible_tool("ansible-playbook")
    work = tmp_path_factory.mktemp("debug-vs-ansible")
    found = []
    for side in ("ansible", "ours"):
        out = work / side
        out.mkdir()
        book = work / f"{side}.yaml"
        book.write_text(yaml.safe_dump(playbook(out), sort_keys=False))
        if side == "ansible":
            proc = subprocess.run([str(tool), "-i", "localhost,", "-c", "local", str(book)], capture_output=True,
                                  text=True, timeout=300, cwd=work, env={"PATH": "/usr/bin:/bin", "HOME": str(work),
                                                                         "ANSIBLE_LOCAL_TEMP": str(work / "tmp")})
            assert proc.returncode == 0, proc.stdout + proc.stderr
        else:
            res = run_playbook(str(book), inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
            assert res.exit_code == 0, res.error or res.tasks
        found.append(json.loads((out / "debug.json").read_text()))
    return found[0], found[1]


@pytest.mark.parametrize("name", list(CASES))
def test_debug_result_as_ansibles(both, name):
    theirs, ours = both
    assert kept(name, ours[name]) == kept(name, theirs[name])


def test_an_undefined_var_warns_and_is_not_a_failure(both):
    ours = both[1]["undefined"]
    assert ours["nope"] == "<< error 1 - 'nope' is undefined >>" and not ours["failed"]
    assert ours["warnings"] == ["Encountered 1 template error.\nerror 1 - 'nope' is undefined"]
