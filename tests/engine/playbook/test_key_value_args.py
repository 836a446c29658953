"""Ansible's one-line `key=value` arguments for every module, `action:` / `local_action:`, and the one-line form of
include_tasks / import_tasks / include_role / import_role: run by real ansible-playbook and by ours on this machine,
the same tasks, statuses and recap."""

from __future__ import annotations

import pytest

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import INVENTORY, same_as_ansible, write


def play(tasks, **more):
    return [{"hosts": "all", "gather_facts": False, **more, "tasks": tasks}]


def test_key_value_arguments_of_every_kind_of_module(tmp_path):
    out = "{{ playbook_dir }}/out"
    book = write(tmp_path / "pb.yml", play([
        {"set_fact": "a=1 b=\"{{ 2 }}\" c=yes d='x y'"},
        {"assert": {"that": ["a == '1'", "b == 2", "c == 'yes'", "d == 'x y'"]}},
        {"name": "folder", "file": f"path={out} state=directory mode=0755"},
        {"file": f"path={out}/t state=touch mode=0600"},
        {"stat": f"path={out}/t", "register": "st"},
        {"assert": {"that": ["st.stat.mode == '0600'"]}},
        {"lineinfile": f"path={out}/t line=\"hello world\" create=yes"},
        {"copy": f"content='x y' dest={out}/c.txt"},
        {"name": "fqcn", "ansible.builtin.debug": "msg=\"{{ d }} and {{ a }}\""},
        {"debug": "var=d"},
        {"command": f"cat {out}/t", "register": "cat"},
        {"assert": {"that": "cat.stdout == 'hello world'"}},
        {"meta": "noop"},
    ]))
    same_as_ansible(book)
    assert (tmp_path.parent / f"{tmp_path.name}-ours" / "out" / "c.txt").read_text() == "x y"


def test_action_and_local_action(tmp_path):
    book = write(tmp_path / "pb.yml", play([
        {"action": "debug msg=\"act {{ 1 + 1 }}\""},
        {"name": "line", "action": "command echo hi", "register": "r"},
        {"assert": {"that": "r.stdout == 'hi'"}},
        {"local_action": "command echo local", "register": "l"},
        {"assert": {"that": "l.stdout == 'local'"}},
        {"action": {"module": "debug", "msg": "mapping"}},
        {"action": {"module": "set_fact", "args": "k=v"}},
        {"assert": {"that": "k == 'v'"}},
        {"name": "fqcn", "action": "ansible.builtin.set_fact z=1"},
        {"assert": {"that": "z == '1'"}},
    ]))
    same_as_ansible(book)


def test_include_and_import_in_one_line(tmp_path):
    write(tmp_path / "say.yml", [{"name": "say", "debug": "msg={{ word | default('hi') }}"}])
    write(tmp_path / "roles" / "r" / "tasks" / "main.yml", [{"name": "main", "debug": "msg=main"}])
    write(tmp_path / "roles" / "r" / "tasks" / "other.yml", [{"name": "other", "debug": "msg=other"}])
    book = write(tmp_path / "pb.yml", play([
        {"import_tasks": "say.yml"},
        {"include_tasks": "file=say.yml"},
        {"name": "fqcn", "ansible.builtin.include_tasks": "say.yml"},
        {"import_role": "name=r tasks_from=other"},
        {"name": "role", "include_role": "name=r"},
    ]))
    same_as_ansible(book)


@pytest.mark.parametrize("task, needle", [
    ({"debug": "msg=\"open"}, "unclosed quote"),
    ({"file": "/tmp/x state=touch"}, "no key=value option"),
    ({"debug": "{{ args }} more"}, "a template"),  # a whole template is the arguments (engine/run/task_args.py)
    ({"include_role": "r"}, "name=ROLE"),
    ({"action": "debug msg=1", "local_action": "debug msg=2"}, "both 'action' and 'local_action'"),
    ({"action": "debug msg=1", "debug": "msg=2"}, "twice"),
    ({"action": ["debug"]}, "write the module and its arguments as one line"),
])
def test_bad_one_line_arguments_are_refused_at_load(tmp_path, task, needle):
    book = write(tmp_path / "pb.yml", play([task]))
    res = run_playbook(str(book), inventory=INVENTORY)
    assert res.exit_code == 4 and needle in res.error and "Traceback" not in res.error, res.error
