"""The engine's actions with Ansible's options and messages: debug's verbosity (skipped below it), assert's
msg alias, success message and the failed condition in its result, set_fact's cacheable (no variable of that
name)."""

from __future__ import annotations

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def run(tmp_path, tasks, **kw):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return run_playbook(str(path), inventory=INV, **kw)


def test_debug_verbosity_assert_and_set_fact_as_ansibles(tmp_path):
    tasks = [{"name": "quiet", "debug": {"msg": "only with -v", "verbosity": 1}},
             {"name": "fact", "set_fact": {"kept": 1, "cacheable": True}},
             {"name": "no cacheable", "assert": {"that": ["kept == 1", "cacheable is not defined"], "quiet": True}},
             {"name": "fails", "assert": {"that": ["kept == 1", "kept > 2"], "msg": "too small"},
              "ignore_errors": True, "register": "a"},
             {"name": "says", "debug": {"msg": "{{ a.assertion }} {{ a.evaluated_to }}"}}]
    res = run(tmp_path, tasks)
    assert res.exit_code == 0, res.tasks
    by_name = {r.task: r for r in res.results}
    assert by_name["quiet"].status == "skipped" and by_name["quiet"].msg == "Verbosity threshold not met."
    assert by_name["no cacheable"].msg == "All assertions passed"
    assert by_name["fails"].msg == "too small" and by_name["says"].msg == "kept > 2 False"
    assert run(tmp_path, tasks[:1], verbose=1).results[0].msg == "only with -v"
