"""import_tasks with delegate_to: its tasks run delegated, as Ansible's (include_tasks still refuses it, as
Ansible's does); compared with real ansible-playbook (tests/engine/run/test_play_flow.py)."""

from __future__ import annotations

import yaml

from engine.api import run_playbook
from tests.engine.run.test_play_flow import log_task, same


def test_an_imports_delegate_to_reaches_its_tasks(tmp_path):
    (tmp_path / "inner.yaml").write_text(yaml.safe_dump([
        {"name": "where", "shell": "echo {{ inventory_hostname }}:{{ inventory_hostname != 'localhost' }} >> {{ log }}"}]))
    play = {"hosts": "a", "tasks": [
        {"import_tasks": str(tmp_path / "inner.yaml"), "delegate_to": "localhost"}, log_task("after")]}
    assert same(tmp_path, play) == {"a": ["True", "after"]}


def test_include_tasks_still_refuses_delegate_to(tmp_path):
    (tmp_path / "inner.yaml").write_text(yaml.safe_dump([log_task("x")]))
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"include_tasks": str(tmp_path / "inner.yaml"), "delegate_to": "localhost"}]}]))
    res = run_playbook(str(book))
    assert res.exit_code == 4
