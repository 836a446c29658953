"""`run_once` as in Ansible: the task runs on the first host of the batch only, rendered with that host's
variables, and what it registers (or sets with set_fact) is there for every host."""

from __future__ import annotations

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"a": {"ansible_connection": "local", "n": 1}, "b": {"ansible_connection": "local", "n": 2},
                         "c": {"ansible_connection": "local", "n": 3}}}}


def test_run_once_runs_on_the_first_host_and_every_host_sees_its_result(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    tasks = [{"name": "once", "command": {"argv": ["sh", "-c", f"echo n={{{{ n }}}} >> {marks}/ran; echo n={{{{ n }}}}"]},
              "run_once": True, "register": "once"},
             {"name": "fact once", "set_fact": {"picked": "{{ inventory_hostname }}"}, "run_once": True},
             {"name": "seen", "debug": {"msg": "{{ once.stdout | trim }} {{ picked }}"}}]
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(path), inventory=INV)
    assert res.exit_code == 0, res.tasks
    assert (marks / "ran").read_text() == "n=1\n"  # once, on the first host, with its variables
    assert [t["host"] for t in res.tasks if t["task"] == "once"] == ["a"]
    assert sorted((t["host"], t["msg"]) for t in res.tasks if t["task"] == "seen") == [
        ("a", "n=1 a"), ("b", "n=1 a"), ("c", "n=1 a")]


def test_a_templated_run_once_renders_with_the_first_hosts_variables(tmp_path):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "x", "debug": {"msg": "x"}, "run_once": "{{ maybe }}"}]}]))
    res = run_playbook(str(path), inventory=INV)
    assert res.exit_code == 4 and "run_once '{{ maybe }}' does not render on a" in res.error, res.error
    res = run_playbook(str(path), inventory=INV, extra_vars={"maybe": True})
    assert res.exit_code == 0 and [t["host"] for t in res.tasks if t["task"] == "x"] == ["a"]
