"""debug as ansible-core 2.19 runs it, compared with real ansible-playbook: `var` of a name or an expression (a
filter, arithmetic, an attribute), of something undefined (Ansible 2.19's "<< error 1 - ... >>" in its place and a
warning, not a failure), the default message, `verbosity` above the run's (skipped), msg and var together (failed).
The same playbook for both tools registers each result and writes them out as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.playbook.ansible_side import each_tool_writes

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
    work = tmp_path_factory.mktemp("debug-vs-ansible")
    folders = each_tool_writes(work, playbook, {"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}})
    theirs, ours = (json.loads((out / "debug.json").read_text()) for out in folders)
    return theirs, ours


@pytest.mark.parametrize("name", list(CASES))
def test_debug_result_as_ansibles(both, name):
    theirs, ours = both
    assert kept(name, ours[name]) == kept(name, theirs[name])


def test_an_undefined_var_warns_and_is_not_a_failure(both):
    ours = both[1]["undefined"]
    assert ours["nope"] == "<< error 1 - 'nope' is undefined >>" and not ours["failed"]
    assert ours["warnings"] == ["Encountered 1 template error.\nerror 1 - 'nope' is undefined"]
