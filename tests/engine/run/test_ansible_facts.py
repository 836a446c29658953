"""ansible_facts as the engine keeps them, compared with real ansible-playbook on the same playbook (two local
hosts): set_fact with cacheable (a fact) and without (a variable only), delegate_facts (the delegate's facts),
setup's answer (a module's ansible_facts), `hostvars[h].ansible_facts`, and ansible_facts before any gathering ({}).
What each host sees is written out as JSON by both tools and compared."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engine.run.results import fact_variables
from tests.engine.playbook.ansible_side import each_tool_writes
from tests.helpers import required_ansible_tool

SEEN = ("{{ {'before': before, 'cached': ansible_facts.cached | default('none'), "
        "'plain_in_facts': ansible_facts.plain | default('none'), 'plain': plain | default('none'), "
        "'cached_var': cached | default('none'), 'h2_given': hostvars['h2'].ansible_facts.given | default('none'), "
        "'h2_system': hostvars['h2'].ansible_facts.system | default('none'), "
        "'own_system': ansible_facts.system | default('none'), 'own_user': ansible_user_id | default('none'), "
        "'h1_user': hostvars['h1'].ansible_facts.user_id | default('none')} | to_json }}")


def playbook(out: Path) -> list:
    return [{"hosts": "h1", "gather_facts": False, "tasks": [
        {"set_fact": {"before": "{{ ansible_facts }}"}},
        {"set_fact": {"cached": 1, "cacheable": True}},
        {"set_fact": {"plain": 2}},
        {"set_fact": {"given": 3, "cacheable": True}, "delegate_to": "h2", "delegate_facts": True},
        {"setup": {"gather_subset": ["!all"], "filter": ["ansible_system"]}, "delegate_to": "h2",
         "delegate_facts": True},
        {"setup": {"gather_subset": ["!all"], "filter": ["ansible_user_id"]}},
        {"copy": {"content": SEEN, "dest": str(out / "seen.json")}},
    ]}]


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict]:
    tool = required_ansible_tool("ansible-playbook")
    python = tool.read_text(errors="replace").splitlines()[0][2:].strip() or sys.executable
    work = tmp_path_factory.mktemp("ansible-facts")
    local = {"ansible_connection": "local", "ansible_python_interpreter": python}
    folders = each_tool_writes(work, playbook, {"all": {"hosts": {"h1": local, "h2": local}}})
    theirs, ours = (json.loads((out / "seen.json").read_text()) for out in folders)
    return theirs, ours


def test_what_a_host_sees_of_facts_is_what_ansible_shows(both):
    theirs, ours = both
    assert ours == theirs
    assert ours["cached"] == 1 and ours["plain_in_facts"] == "none" and ours["h2_given"] == 3
    assert ours["before"] == {} and ours["h2_system"] == "Linux" and ours["own_system"] == "none"


def test_a_host_answer_never_sets_how_a_host_is_reached():
    given = {"ansible_host": "evil", "ansible_user": "x", "ansible_become_user": "root", "ansible_port": 1,
             "ansible_python_interpreter": "/x", "ansible_ssh_common_args": "-o ProxyCommand=x", "dfp_root": "/",
             "ansible_ssh_host_key_rsa_public": "AAAA", "ansible_hostname": "h", "custom": 1, "ansible_local": {}}
    layer = fact_variables(given)
    assert set(layer) == {"ansible_facts", "ansible_ssh_host_key_rsa_public", "ansible_hostname", "custom",
                          "ansible_local"}
    assert layer["ansible_facts"]["host"] == "evil" and layer["ansible_facts"]["ansible_local"] == {}  # namespaced only
