"""A role's dependencies (meta/main.yml) run before it, as Ansible runs them: recursively, each once per play
unless its parameters differ or it allows duplicates, with their defaults and the parent's parameters. Each shape
runs with real ansible-playbook and with ours on this machine: the same tasks, statuses and recap."""

from __future__ import annotations

import shutil

from engine.api import run_playbook
from tests.ansible_targets.source import targets_dir
from tests.engine.playbook.ansible_side import INVENTORY, same_as_ansible, write


def role(base, name, tasks, meta=None, defaults=None, vars=None):
    folder = base / "roles" / name
    write(folder / "tasks" / "main.yml", tasks)
    if meta is not None:
        write(folder / "meta" / "main.yml", meta)
    if defaults is not None:
        write(folder / "defaults" / "main.yml", defaults)
    if vars is not None:
        write(folder / "vars" / "main.yml", vars)


def say(text):
    return {"name": "say", "debug": {"msg": text}}


def test_dependencies_run_first_once_unless_their_parameters_differ(tmp_path):
    role(tmp_path, "common", [say("common {{ common_word }}")], defaults={"common_word": "default"})
    role(tmp_path, "p", [say("p {{ x }} {{ from_parent | default('-') }}")], meta={"allow_duplicates": False})
    role(tmp_path, "a", [say("a")], meta={"dependencies": ["common", {"role": "p", "vars": {"x": 1}}]},
         vars={"from_parent": "a's var"})
    role(tmp_path, "b", [say("b")], meta={"dependencies": [{"name": "common"}, {"role": "p", "x": 2}]})
    role(tmp_path, "dup", [say("dup")], meta={"allow_duplicates": True})
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False,
                                        "roles": ["a", "b", "a", "dup", "dup"],
                                        "tasks": [{"assert": {"that": "common_word == 'default'"}}]}])
    _, steps, _, _ = same_as_ansible(book)
    assert [s for s, _ in steps].count("common : say") == 1 and [s for s, _ in steps].count("dup : say") == 2


def test_dependency_when_tags_and_an_imported_roles_dependencies(tmp_path):
    role(tmp_path, "dep", [say("dep")])
    role(tmp_path, "off", [say("off")])
    role(tmp_path, "top", [say("top")], meta={"dependencies": [{"role": "dep", "tags": ["t"]},
                                                               {"role": "off", "when": "false"}]})
    role(tmp_path, "other", [say("other")], meta={"dependencies": [{"role": "dep", "tags": ["t"]}]})
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"import_role": {"name": "top"}}, {"name": "inc", "include_role": {"name": "other"}}]}])
    same_as_ansible(book)


def test_nested_dependencies_of_ansibles_include_import_target(tmp_path):
    source = targets_dir() / "include_import" / "roles"
    shutil.copytree(source, tmp_path / "roles")
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "nested", "include_role": {"name": "nested_include_task"}},
        {"import_role": {"name": "role_with_deps"}},
        {"name": "twice", "include_role": {"name": "dup_allowed_role"}},
        {"name": "again", "include_role": {"name": "dup_allowed_role"}},
    ]}])
    same_as_ansible(book)


def test_a_dependency_cycle_is_refused_at_load(tmp_path):
    role(tmp_path, "x", [say("x")], meta={"dependencies": [{"role": "y", "v": 1}]})
    role(tmp_path, "y", [say("y")], meta={"dependencies": [{"role": "x", "v": 2}]})
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False, "roles": ["x"]}])
    res = run_playbook(str(book), inventory=INVENTORY)
    assert res.exit_code == 4 and "imports itself" in res.error, res.error
