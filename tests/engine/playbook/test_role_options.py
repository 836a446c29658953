"""include_role / import_role options (tasks_from, vars_from, defaults_from, handlers_from, public, allow_duplicates,
rolespec_validate, the one-line form) and role handlers notified across roles by name, by `listen` and as
`ROLE : NAME`. Each shape runs with real ansible-playbook and with ours on this machine: the same tasks, statuses,
recap and debug messages."""

from __future__ import annotations

import pytest

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import INVENTORY, same_as_ansible, write


def play(tasks, roles=None):
    return [{"hosts": "all", "gather_facts": False, "roles": roles or [], "tasks": tasks}]


def test_from_files_and_flags(tmp_path):
    r = tmp_path / "roles" / "r"
    write(r / "tasks" / "main.yml", [{"name": "main", "debug": {"msg": "{{ word }} {{ other }}"}},
                                        {"name": "poke", "command": "true", "notify": "h"}])
    write(r / "tasks" / "alt.yml", [{"name": "alt", "debug": {"msg": "alt {{ word }} {{ other }}"}},
                                       {"name": "poke", "command": "true", "notify": "alt h"}])
    write(r / "vars" / "main.yml", {"word": "main vars"})
    write(r / "vars" / "alt.yml", {"word": "alt vars"})
    write(r / "defaults" / "main.yml", {"other": "main defaults"})
    write(r / "defaults" / "alt.yml", {"other": "alt defaults"})
    write(r / "handlers" / "main.yml", [{"name": "h", "debug": {"msg": "main handler"}}])
    write(r / "handlers" / "alt.yml", [{"name": "alt h", "debug": {"msg": "alt handler"}}])
    book = write(tmp_path / "pb.yml", play([
        {"import_role": {"name": "r", "rolespec_validate": False}},
        {"name": "alt", "include_role": {"name": "r", "tasks_from": "alt", "vars_from": "alt.yml",
                                         "defaults_from": "alt", "handlers_from": "alt.yml",
                                         "allow_duplicates": True}},
        {"name": "one line", "include_role": "name=r tasks_from=alt.yml vars_from=alt handlers_from=alt"},
    ]))
    same_as_ansible(book)


def test_handlers_notified_across_roles_by_name_listen_and_role_prefix(tmp_path):
    write(tmp_path / "roles" / "a" / "tasks" / "main.yml", [
        {"name": "poke", "command": "true", "notify": ["b handler", "topic", "b : prefixed"]}])
    write(tmp_path / "roles" / "b" / "tasks" / "main.yml", [{"name": "quiet", "debug": {"msg": "b"}}])
    write(tmp_path / "roles" / "b" / "handlers" / "main.yml", [
        {"name": "b handler", "debug": {"msg": "by name"}},
        {"name": "listener", "debug": {"msg": "by topic"}, "listen": "topic"},
        {"name": "prefixed", "debug": {"msg": "by role prefix"}},
        {"name": "never", "debug": {"msg": "not notified"}},
    ])
    write(tmp_path / "roles" / "c" / "handlers" / "main.yml", [{"name": "c handler", "debug": {"msg": "c"}}])
    write(tmp_path / "roles" / "c" / "tasks" / "main.yml", [])
    book = write(tmp_path / "pb.yml", play([{"name": "inc", "include_role": {"name": "c"}},
                                            {"name": "later", "command": "true", "notify": "c : c handler"}],
                                           roles=["a", "b"]))
    same_as_ansible(book)


def test_a_collections_role_beside_the_playbook_and_its_listen_topics_by_role_prefix(tmp_path):
    """collections/ansible_collections/NS/COL/roles/ROLE beside the playbook; its listen topics answer to
    `ROLE : TOPIC` and `NS.COL.ROLE : TOPIC`, a plain role's to `ROLE : TOPIC`."""
    coll = tmp_path / "collections" / "ansible_collections" / "ns" / "col" / "roles" / "r"
    write(coll / "tasks" / "main.yml", [{"name": "in collection", "debug": {"msg": "coll"}}])
    write(coll / "handlers" / "main.yml", [{"name": "ch", "debug": {"msg": "collection heard"}, "listen": "ctopic"}])
    write(tmp_path / "roles" / "p" / "handlers" / "main.yml", [
        {"name": "ph", "debug": {"msg": "plain heard"}, "listen": "ptopic"}])
    book = write(tmp_path / "pb.yml", play([
        {"name": "short", "command": "true", "notify": ["r : ctopic", "p : ptopic"]},
        {"meta": "flush_handlers"},
        {"name": "full", "command": "true", "notify": "ns.col.r : ctopic"}], roles=["ns.col.r", "p"]))
    same_as_ansible(book)


def test_role_vars_and_defaults_seen_by_the_play(tmp_path):
    """Ansible's public_exposure shapes that hold here: a static role's defaults and vars are seen by the whole
    play from its start; include_role's (public or not) are seen by its own tasks."""
    for name in ("static", "dyn"):
        write(tmp_path / "roles" / name / "tasks" / "main.yml", [{"set_fact": {f"{name}_tasks_var": "t"}}])
        write(tmp_path / "roles" / name / "defaults" / "main.yml", {f"{name}_defaults_var": "d"})
        write(tmp_path / "roles" / name / "vars" / "main.yml", {f"{name}_vars_var": "v"})
    book = write(tmp_path / "pb.yml", play([
        {"assert": {"that": ["static_defaults_var == 'd'", "static_vars_var == 'v'"]}},
        {"import_role": {"name": "static"}},
        {"name": "dyn", "include_role": {"name": "dyn", "public": True}},
        {"assert": {"that": ["dyn_tasks_var == 't'", "dyn_defaults_var == 'd'", "dyn_vars_var == 'v'"]}},
    ]))
    same_as_ansible(book)


@pytest.mark.parametrize("spec, needle", [
    ({"name": "r", "vars_from": "missing"}, "vars_from: the role has no file 'missing'"),
    ({"name": "r", "handlers_from": "../x"}, "'handlers_from' must be"),
    ({"name": "r", "public": "maybe"}, "'include_role.public' must be true or false"),
    ({"name": "r", "apply": {"tags": ["x"]}, "bogus": 1}, "not supported: include_role.bogus"),
])
def test_bad_options_are_refused_at_load(tmp_path, spec, needle):
    write(tmp_path / "roles" / "r" / "tasks" / "main.yml", [{"debug": {"msg": "r"}}])
    book = write(tmp_path / "pb.yml", play([{"include_role": spec}]))
    res = run_playbook(str(book), inventory=INVENTORY)
    assert res.exit_code == 4 and needle in res.error, res.error
