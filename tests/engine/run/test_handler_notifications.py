"""Which handlers a notification runs and when (engine/run/handlers.py), compared with real ansible-playbook:
names shared by several handlers, listen topics, a handler notifying an earlier one or itself, templated
notifications and handler names, include_role's handlers, a handler including a file in a loop, and a
notification no handler answers."""

from __future__ import annotations

from engine.api import run_playbook
from engine.errors import UserError
from tests.engine.playbook.ansible_side import INVENTORY, ansible, ours, real_ansible_playbook, same_as_ansible, write


def debug(name: str, msg: str, **more) -> dict:
    return {"name": name, "debug": {"msg": msg}, **more}


def test_shared_names_listen_and_handlers_notifying_handlers(tmp_path):
    book = write(tmp_path / "pb.yml", [{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "poke", "command": "true", "notify": ["dup", "topic", "h2", "loop"]},
                  {"meta": "flush_handlers"},
                  debug("between", "between")],
        "handlers": [debug("h1", "h1 ran"),
                     debug("dup", "first dup"), debug("dup", "second dup"),
                     debug("l1", "listener one", listen="topic"), debug("l1", "same-named listener", listen="topic"),
                     {"name": "h2", "command": "true", "notify": "h1"},
                     {"name": "loop", "command": "true", "notify": "loop"}]}])
    same_as_ansible(book)


def test_templated_notify_and_names_and_include_role_handlers(tmp_path):
    write(tmp_path / "roles" / "r" / "tasks" / "main.yml", [{"name": "role poke", "command": "true", "notify": "n1"}])
    write(tmp_path / "roles" / "r" / "handlers" / "main.yml", [debug("n1", "role n1"),
                                                               debug("rl", "role listener", listen="n3")])
    book = write(tmp_path / "pb.yml", [{
        "hosts": "all", "gather_facts": False, "vars": {"h1": "n1", "h2": "n2", "many": ["n1", "n3"]},
        "tasks": [{"name": "poke", "command": "true", "notify": ["{{ h1 }}", "{{ h2 }}", "n3"]},
                  {"meta": "flush_handlers"},
                  {"include_role": {"name": "r"}},
                  {"meta": "flush_handlers"},
                  {"name": "list", "command": "true", "notify": "{{ many }}"}],
        "handlers": [debug("n1", "play n1"), debug("{{ h2 }}", "templated name"),
                     debug("pl", "play listener", listen="n3")]}])
    same_as_ansible(book)


def test_a_handler_including_a_file_in_a_loop(tmp_path):
    write(tmp_path / "inc.yml", [debug("included", "included {{ item }}")])
    book = write(tmp_path / "pb.yml", [{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "poke", "command": "true", "notify": "inc"}],
        "handlers": [{"name": "inc", "include_tasks": "inc.yml", "loop": [1, 2]}]}])
    theirs, mine = ansible(book), ours(book)  # (Ansible's looped "included:" lines name their item: not steps)
    assert mine[0] == theirs[0] == 0 and mine[2:] == theirs[2:] and mine[2]["ok"] == 5


def test_a_notification_no_handler_answers(tmp_path, monkeypatch):
    book = write(tmp_path / "pb.yml", [{"hosts": "all", "gather_facts": False,
                                        "tasks": [{"name": "poke", "command": "true", "notify": "nowhere"}]}])
    res = run_playbook(str(book), inventory=INVENTORY)
    words = "The requested handler 'nowhere' was not found in either the main handlers list nor in the listening"
    assert res.exit_code == 4 and words in res.error
    theirs = real_ansible_playbook(book, write(tmp_path / "inv.yml", INVENTORY))
    assert words in theirs.stdout + theirs.stderr
    monkeypatch.setenv("ANSIBLE_ERROR_ON_MISSING_HANDLER", "false")
    assert run_playbook(str(book), inventory=INVENTORY).exit_code == 0


def test_run_once_handlers_templated_run_once_and_an_include_that_does_not_parse(tmp_path):
    """A run_once handler runs on the first host only; a templated run_once renders when the task runs."""
    inventory = {"all": {"hosts": {h: INVENTORY["all"]["hosts"]["h"] for h in ("a", "b")}}}
    book = write(tmp_path / "pb.yml", [{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "poke", "command": "true", "notify": ["once", "templated"]}],
        "handlers": [debug("once", "once", run_once=True),
                     debug("templated", "templated", run_once="{{ missing | default(False) }}")]}])
    res = run_playbook(str(book), inventory=inventory)
    assert [(r.task, r.host) for r in res.results if r.handler] == [("once", "a"), ("templated", "a"),
                                                                     ("templated", "b")]


def test_what_ansible_refuses_as_a_handler_in_its_words(tmp_path):
    nested = [{"name": "b", "block": [debug("x", "x"), {"block": [debug("y", "y")]}]}]
    write(tmp_path / "blocky.yml", nested)
    cases = {
        "role": ({"name": "h", "include_role": {"name": "r"}}, "Using 'include_role' as a handler is not supported."),
        "block": ({"name": "h", **nested[0]}, "Using a block as a handler is not supported."),
        "include": ({"name": "h", "include_tasks": "blocky.yml"}, "Using a block as a handler is not supported."),
        "flush": ({"name": "h", "meta": "flush_handlers"}, "flush_handlers cannot be used as a handler"),
    }
    for name, (handler, words) in cases.items():
        book = write(tmp_path / f"{name}.yml", [{"hosts": "all", "gather_facts": False, "handlers": [handler],
                                                 "tasks": [{"name": "poke", "command": "true", "notify": "h"}]}])
        try:
            res = run_playbook(str(book), inventory=INVENTORY, raise_user_errors=True)
        except UserError as exc:
            error = str(exc)
        else:
            error = res.error or ""
        assert words in error, (name, error)
        theirs = real_ansible_playbook(book, write(tmp_path / "inv.yml", INVENTORY))
        assert words in theirs.stdout + theirs.stderr, name


def test_a_plain_block_of_handlers_is_handlers(tmp_path):
    book = write(tmp_path / "pb.yml", [{
        "hosts": "all", "gather_facts": False,
        "tasks": [{"name": "poke", "command": "true", "notify": "hb"}],
        "handlers": [{"name": "ignored", "block": [debug("hb", "in block"), debug("other", "not notified")]}]}])
    same_as_ansible(book)
