"""include_role, import_playbook and Ansible's role layout (tasks/main.yml, defaults/main.yml, vars/main.yml,
handlers/main.yml), read when the playbook loads as Ansible's static imports are; a bad import is refused at load
naming the file."""

from __future__ import annotations

import pytest
import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local"}}}}


def write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def ansible_role(tmp_path):
    """A role in Ansible's layout: main.yml files in tasks/, defaults/, vars/, handlers/, and a second task file."""
    role = tmp_path / "roles" / "web"
    write(role / "tasks" / "main.yml", [{"name": "say", "debug": {"msg": "{{ greeting }} {{ port }}"}},
                                        {"name": "poke", "command": {"argv": ["true"]}, "notify": "restart web"}])
    write(role / "tasks" / "extra.yml", [{"name": "extra", "debug": {"msg": "extra {{ port }}"}}])
    write(role / "defaults" / "main.yml", {"greeting": "hello", "port": 80})
    write(role / "vars" / "main.yml", {"port": 8080})
    write(role / "handlers" / "main.yml", [{"name": "restart web", "debug": {"msg": "restarted"}}])
    return role


def test_a_role_in_ansibles_layout_runs_with_its_defaults_vars_and_handlers(tmp_path, ansible_role):
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False, "roles": ["web"]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, res.tasks
    assert [(t["task"], t["status"]) for t in res.tasks] == [("say", "ok"), ("poke", "changed"), ("restart web", "ok")]
    assert [t["msg"] for t in res.tasks if t["module"] == "debug"] == ["hello 8080", "restarted"]  # vars/ over defaults/


def test_include_role_with_tasks_from_vars_and_when(tmp_path, ansible_role):
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "first", "ansible.builtin.include_role": {"name": "web", "tasks_from": "extra"}},
        {"include_role": {"name": "web"}, "vars": {"greeting": "hi"}},
        {"include_role": {"name": "web", "tasks_from": "extra.yml"}, "when": "false"},
    ]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, res.tasks
    shown = [(t["task"], t["status"]) for t in res.tasks]
    # each include is a result of its own ("included: web", as Ansible's), its tasks follow where it ran
    assert shown == [("first", "ok"), ("extra", "ok"), ("include_role : web", "ok"), ("say", "ok"), ("poke", "changed"),
                     ("include_role : web", "skipped"), ("restart web", "ok")], shown
    assert res.tasks[0]["msg"] == "included: web" and res.tasks[3]["msg"] == "hi 8080"


@pytest.mark.parametrize("entry, needle", [
    ({"include_role": {"name": "web", "bogus": 1}}, "not supported: include_role.bogus"),
    ({"import_role": {"name": "{{ which }}"}}, "'{{ which }}' does not render when the playbook loads"),
    ({"include_role": {"name": "web"}, "until": "x"}, "not supported: until"),
    ({"include_role": {"name": "nope"}}, "unknown role 'nope'"),
])
def test_bad_include_role_is_refused_at_load(tmp_path, ansible_role, entry, needle):
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False, "tasks": [entry]}])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 4 and needle in res.error and str(book) in res.error, res.error


def test_import_playbook_runs_its_plays_in_place_with_vars_tags_and_when(tmp_path, ansible_role):
    write(tmp_path / "sub" / "inner.yml", [
        {"name": "inner", "hosts": "all", "gather_facts": False, "vars": {"word": "own", "kept": "k"},
         "tasks": [{"name": "inner task", "debug": {"msg": "{{ word }} {{ kept }}"}}]}])
    book = write(tmp_path / "site.yml", [
        {"hosts": "all", "gather_facts": False, "tasks": [{"name": "before", "debug": {"msg": "before"}}]},
        {"ansible.builtin.import_playbook": "sub/inner.yml", "vars": {"word": "given"}, "tags": ["imp"]},
        {"import_playbook": "sub/inner.yml", "when": "false"},
    ])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, res.tasks
    assert [(t["task"], t["status"], t["msg"][:10]) for t in res.tasks] == [
        ("before", "ok", "before"), ("inner task", "ok", "given k"), ("inner task", "skipped", "skipped: c")]
    tagged = run_playbook(str(book), inventory=INV, tags=["imp"])
    assert [t["msg"] for t in tagged.tasks] == ["given k"]


@pytest.mark.parametrize("entry, needle", [
    ({"import_playbook": "site.yml"}, "imports itself"),
    ({"import_playbook": "missing.yml"}, "not found"),
    ({"import_playbook": "{{ x }}.yml"}, "does not render when the playbook loads ('x' is undefined)"),
    ({"import_playbook": "other.yml", "hosts": "all"}, "unknown keyword(s) hosts"),
])
def test_bad_import_playbook_is_refused_at_load(tmp_path, entry, needle):
    write(tmp_path / "other.yml", [{"hosts": "all", "tasks": []}])
    book = write(tmp_path / "site.yml", [entry])
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 4 and needle in res.error and "site.yml" in res.error, res.error
