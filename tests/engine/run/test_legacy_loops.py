"""The legacy loops Ansible playbooks still use, looped as Ansible loops them: with_items (one level flattened),
with_dict ({key, value} items), with_together (lists zipped, the shorter padded with None); two loop keywords on
one task are refused at load."""

from __future__ import annotations

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def msgs(tmp_path, task, **play_vars):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": play_vars,
                                     "tasks": [dict(task, name="t")]}], sort_keys=False))
    res = run_playbook(str(path), inventory=INV)
    assert res.exit_code == 0, res.tasks
    return [r["msg"] for r in res.registered["h"]["out"]["results"]]


def test_with_items_flattens_one_level(tmp_path):
    got = msgs(tmp_path, {"debug": {"msg": "{{ item }}"}, "with_items": [[1, 2], 3, [[4]]], "register": "out"})
    assert got == ["1", "2", "3", "[4]"]


def test_with_dict_gives_key_and_value(tmp_path):
    got = msgs(tmp_path, {"debug": {"msg": "{{ item.key }}={{ item.value }}"}, "with_dict": "{{ users }}",
                          "register": "out"}, users={"alice": 1, "bob": 2})
    assert got == ["alice=1", "bob=2"]


def test_with_together_zips_and_pads(tmp_path):
    got = msgs(tmp_path, {"debug": {"msg": "{{ item.0 }}-{{ item.1 }}"}, "with_together": [["a", "b"], [1]],
                          "register": "out"})
    assert got == ["a-1", "b-None"]


def test_two_loops_on_one_task_are_refused(tmp_path):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "t", "debug": {"msg": "x"}, "loop": [1], "with_dict": {"a": 1}}]}]))
    res = run_playbook(str(path), inventory=INV)
    assert res.exit_code == 4 and "'loop' and 'with_dict'" in res.error, res.error
