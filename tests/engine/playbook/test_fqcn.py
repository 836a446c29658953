"""Fully qualified module names as Ansible users write them: ansible.builtin.X and ansible.legacy.X are our X
(modules, engine actions and the import keywords alike); another collection's module is refused at load, by
name, before any host is touched."""

from __future__ import annotations

import pytest
import yaml

from engine.api import run_playbook
from engine.errors import UserError
from engine.playbook.tasks import short_names

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def book(tmp_path, tasks):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return str(path)


def test_builtin_and_legacy_names_run_our_modules_and_the_second_run_changes_nothing(tmp_path):
    base = tmp_path / "out"
    tasks = [
        {"name": "folder", "ansible.builtin.file": {"path": str(base), "state": "directory", "mode": "0755"}},
        {"name": "content", "ansible.legacy.copy": {"dest": str(base / "a.txt"), "content": "a\n", "mode": "0644"}},
        {"name": "look", "ansible.builtin.stat": {"path": str(base / "a.txt")}, "register": "st"},
        {"name": "check", "ansible.builtin.assert": {"that": ["st.exists"]}},
        {"name": "say", "ansible.builtin.debug": {"msg": "size {{ st.size }}"}},
        {"name": "fact", "ansible.builtin.set_fact": {"seen": "{{ st.size }}"}},
        {"name": "run", "ansible.builtin.command": {"argv": ["true"]}, "changed_when": False},
    ]
    first = run_playbook(book(tmp_path, tasks), inventory=INV)
    assert first.exit_code == 0, first.tasks
    assert (base / "a.txt").read_text() == "a\n"
    assert [t["module"] for t in first.tasks] == ["file", "copy", "stat", "assert", "debug", "set_fact", "command"]
    assert first.tasks[4]["msg"] == "size 2"
    again = run_playbook(book(tmp_path, tasks), inventory=INV)
    assert again.exit_code == 0 and not any(t["changed"] for t in again.tasks), again.tasks


def test_another_collections_module_is_refused_by_name_and_nothing_runs(tmp_path):
    made = tmp_path / "made"
    tasks = [{"name": "first", "file": {"path": str(made), "state": "directory"}},
             {"name": "firewall", "community.general.ufw": {"rule": "allow", "port": "22"}}]
    res = run_playbook(book(tmp_path, tasks), inventory=INV)
    assert res.exit_code == 4 and not made.exists()
    assert "module 'community.general.ufw' is from the collection 'community.general'" in res.error
    assert "task 2" in res.error and "ansible-playbook" in res.error and "Traceback" not in res.error


def test_a_module_named_twice_in_two_spellings_is_refused():
    with pytest.raises(UserError, match="names 'copy' twice"):
        short_names({"name": "x", "copy": {"dest": "/a"}, "ansible.builtin.copy": {"dest": "/b"}}, "pb.yaml: task 1")


def test_keys_without_a_collection_are_left_as_they_are():
    raw = {"name": "x", "debug": {"msg": "hi"}, "when": "a.b"}
    assert short_names(raw, "pb.yaml: task 1") is raw
    assert short_names({"ansible.builtin.import_role": {"name": "r"}}, "s") == {"import_role": {"name": "r"}}
