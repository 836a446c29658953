"""Connection variables given as templates in the inventory (ansible-core's own integration targets write
`ansible_python_interpreter="{{ ansible_playbook_python }}"`) are rendered before the host is reached, with the
host's inventory variables; one that cannot render leaves the host unreachable with a message naming it."""

from __future__ import annotations

import sys

import yaml

from engine.api import run_playbook


def book(tmp_path):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": True,
                                     "tasks": [{"name": "x", "debug": {"msg": "x"}}]}], sort_keys=False))
    return str(path)


def test_a_templated_interpreter_renders_with_the_hosts_variables(tmp_path):
    ini = tmp_path / "inv.ini"
    ini.write_text('a ansible_connection=local ansible_python_interpreter="{{ ansible_playbook_python }}"\n'
                   'b ansible_connection=local my_python="' + sys.executable + '" '
                   'ansible_python_interpreter="{{ my_python }}"\n')
    res = run_playbook(book(tmp_path), inventory=str(ini))
    assert res.exit_code == 0, res.tasks
    for host in ("a", "b"):
        facts = next(r.result["facts"] for r in res.find("Gathering facts", host))
        assert facts["python"]["executable"] == sys.executable


def test_an_interpreter_template_that_cannot_render_names_the_variable(tmp_path):
    inv = {"all": {"hosts": {"a": {"ansible_connection": "local",
                                   "ansible_python_interpreter": "{{ no_such_var }}"}}}}
    res = run_playbook(book(tmp_path), inventory=inv)
    assert res.exit_code != 0
    msgs = str(res.tasks)
    assert "ansible_python_interpreter of host a" in msgs
