"""import_tasks / include_tasks (and their ansible.builtin names): a task file's tasks in place, with the
import's vars, when, tags and become, from a role's folder or beside the playbook; cycles, templated names and
loops are refused at load with the file named."""

from __future__ import annotations

import pytest
import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def messages(res):
    return [(t["task"], t["status"], t["msg"]) for t in res.tasks]


def test_imported_tasks_run_in_place_with_the_imports_vars_and_when(tmp_path):
    write(tmp_path / "tasks" / "say.yaml", [{"name": "say", "debug": {"msg": "{{ word }}"}},
                                            {"name": "say again", "debug": {"msg": "{{ word }}!"}}])
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"import_tasks": "say.yaml", "vars": {"word": "one"}},
        {"include_tasks": "say.yaml", "vars": {"word": "two"}, "when": "false"},
        {"ansible.builtin.import_tasks": "tasks/say.yaml", "vars": {"word": "three"}, "tags": ["t3"]},
    ]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, messages(res)
    shown = [(t["task"], t["status"], t["msg"]) for t in res.tasks]
    assert shown[:2] == [("say", "ok", "one"), ("say again", "ok", "one!")]
    # the include itself, skipped by its when: one result, none for its tasks (as Ansible's dynamic include)
    assert [(t, s) for t, s, _ in shown[2:3]] == [("include_tasks", "skipped")]
    assert shown[3:] == [("say", "ok", "three"), ("say again", "ok", "three!")]
    tagged = run_playbook(str(book), inventory=INV, tags=["t3"])
    assert [t["msg"] for t in tagged.tasks] == ["three", "three!"]


def test_a_role_imports_a_file_from_its_own_folder(tmp_path):
    write(tmp_path / "roles" / "r" / "tasks.yaml", [{"import_tasks": "step.yaml", "vars": {"n": 2}}])
    write(tmp_path / "roles" / "r" / "step.yaml", [{"name": "step", "debug": {"msg": "n={{ n }}"}}])
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "roles": ["r"]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0 and [t["msg"] for t in res.tasks] == ["n=2"], messages(res)


@pytest.mark.parametrize("entry, needle", [
    ({"import_tasks": "loop.yaml"}, "imports itself"),
    ({"include_tasks": "say.yaml", "apply": {"tags": ["x"]}}, "unknown keyword(s) apply"),
    ({"import_tasks": "missing.yaml"}, "Could not find or access the task file 'missing.yaml'"),
])
def test_bad_imports_are_refused_at_load_naming_the_file(tmp_path, entry, needle):
    write(tmp_path / "loop.yaml", [{"import_tasks": "loop.yaml"}])
    write(tmp_path / "say.yaml", [{"name": "say", "debug": {"msg": "hi"}}])
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": [entry]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 4 and needle in res.error, res.error


def test_a_name_using_the_imports_vars_is_rendered_with_them_so_one_file_reads_as_two_steps(tmp_path):
    write(tmp_path / "tasks" / "step.yaml", [{"name": "Start {{ what }}", "debug": {"msg": "{{ what }}"}},
                                             {"name": "Then {{ not_an_import_var }}", "debug": {"msg": "x"}}])
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "vars": {"not_an_import_var": "y"},
                                         "tasks": [{"import_tasks": "step.yaml", "vars": {"what": "the nodes"}},
                                                   {"import_tasks": "step.yaml", "vars": {"what": "the head"}}]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, messages(res)
    assert [t["task"] for t in res.tasks] == ["Start the nodes", "Then {{ not_an_import_var }}", "Start the head",
                                              "Then {{ not_an_import_var }}"]


def test_import_role_tasks_from_runs_that_file_with_the_roles_defaults(tmp_path):
    write(tmp_path / "roles" / "r" / "defaults.yaml", {"greeting": "hello"})
    write(tmp_path / "roles" / "r" / "tasks.yaml", [{"name": "main tasks", "fail": {"msg": "not these"}}])
    write(tmp_path / "roles" / "r" / "tasks" / "other.yaml", [{"name": "other", "debug": {"msg": "{{ greeting }}"}}])
    write(tmp_path / "roles" / "r" / "variables.yaml", [])
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"import_role": {"name": "r", "tasks_from": "variables"}},
        {"import_role": {"name": "r", "tasks_from": "other"}},
        {"name": "the defaults are there", "debug": {"msg": "{{ greeting }} again"}},
    ]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, messages(res)
    assert [(t["task"], t["msg"]) for t in res.tasks] == [("other", "hello"), ("the defaults are there", "hello again")]


@pytest.mark.parametrize("tasks_from, why", [("nothere", "has no task file 'nothere'"), ("../x", "'tasks_from' must be the name of a task file")])
def test_a_tasks_from_that_is_not_a_file_of_the_role_is_refused_at_load(tmp_path, tasks_from, why):
    write(tmp_path / "roles" / "r" / "tasks.yaml", [{"name": "t", "debug": {"msg": "x"}}])
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"import_role": {"name": "r", "tasks_from": tasks_from}}]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code != 0 and why in res.error, res.error


def test_an_include_naming_no_file_quotes_its_lines_with_secret_values_masked(tmp_path):
    """Ansible's 'No file specified' parser error with its Origin block (the task's line and the two before it);
    nothing of the run is known yet to mask with, so a quoted line setting a secret-named key shows it masked."""
    (tmp_path / "steps.yaml").write_text("- set_fact:\n    db_password: hunter2xyz\n- name: no file here\n  include_tasks:\n")
    book = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": [{"import_tasks": "steps.yaml"}]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 4 and res.error.startswith("No file specified for include_tasks"), res.error
    assert f"Origin: {tmp_path / 'steps.yaml'}:3:3\n" in res.error, res.error
    assert "\n2     db_password: ********\n3 - name: no file here\n" in res.error, res.error
    assert "hunter2xyz" not in res.error
