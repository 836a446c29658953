"""Dynamic includes on our side alone: an include read at load (a plain name) and one read when reached (the same
name as a template) give the same run; what an included file brings is masked when secret; a failure inside
one goes to the block's rescue."""

from __future__ import annotations

import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h1": {"ansible_connection": "local"}, "h2": {"ansible_connection": "local"}}}}


def _run(tmp_path, tasks: list, files: dict):
    for name, data in files.items():
        (tmp_path / name).write_text(yaml.safe_dump(data, sort_keys=False))
    book = tmp_path / "pb.yml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return run_playbook(str(book), inventory=INV)


FILES = {"inc.yml": [{"name": "inner", "debug": {"msg": "{{ greet }} {{ inventory_hostname }}"}, "tags": ["t"]},
                     {"name": "set", "set_fact": {"done": True}}]}


def _steps(res):
    return sorted((r.host, r.task, r.status, r.msg) for r in res.results)  # hosts run in parallel


def test_a_plain_include_and_a_templated_one_run_alike(tmp_path):
    plain = _run(tmp_path, [{"name": "inc", "include_tasks": "inc.yml", "vars": {"greet": "hi"},
                             "when": "inventory_hostname == 'h1'", "tags": ["x"]},
                            {"name": "after", "debug": {"msg": "{{ done | default(false) }}"}}], FILES)
    templated = _run(tmp_path, [{"name": "inc", "include_tasks": "{{ 'inc' }}.yml", "vars": {"greet": "hi"},
                                 "when": "inventory_hostname == 'h1'", "tags": ["x"]},
                                {"name": "after", "debug": {"msg": "{{ done | default(false) }}"}}], FILES)
    assert plain.exit_code == templated.exit_code == 0
    assert _steps(plain) == _steps(templated)
    assert ("h1", "inner", "ok", "hi h1") in _steps(plain) and ("h2", "after", "ok", "False") in _steps(plain)


def test_a_secret_in_an_included_file_is_masked(tmp_path):
    res = _run(tmp_path, [{"include_tasks": "{{ 'sec.yml' }}"}],
               {"sec.yml": [{"debug": {"msg": "value {{ api_password }}"}, "vars": {"api_password": "hunter2-x"}}]})
    assert res.exit_code == 0 and all("hunter2-x" not in r.msg for r in res.results)


def test_a_failure_in_a_looped_include_goes_to_the_rescue(tmp_path):
    res = _run(tmp_path, [{"block": [{"include_tasks": "{{ item }}.yml", "loop": ["ok", "bad"]}],
                           "rescue": [{"name": "rescued", "debug": {"msg": "r {{ ansible_failed_task.name }}"}}]}],
               {"ok.yml": [{"name": "fine", "debug": {"msg": "fine"}}],
                "bad.yml": [{"name": "boom", "fail": {"msg": "boom"}}]})
    assert res.exit_code == 0
    assert [r.msg for r in res.results if r.task == "rescued"] == ["r boom", "r boom"]
