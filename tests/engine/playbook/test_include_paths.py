"""Where import_tasks / include_tasks find their file, as Ansible finds it: inside a role its tasks/ folder first
(handlers/ for its handlers), then beside the file that names it, then the role's folder, then the playbook's;
outside a role beside the including file, then the playbook's folder. Each shape runs with real ansible-playbook
and with ours: the same tasks, statuses and recap."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import ansible, ours, same_as_ansible, write


def play(tasks=None, roles=None):
    return [{"hosts": "all", "gather_facts": False, "roles": roles or [], "tasks": tasks or []}]


def test_a_roles_include_looks_in_tasks_first_then_beside_the_including_file(tmp_path):
    role = tmp_path / "roles" / "r"
    write(role / "tasks" / "main.yml", [{"include_tasks": "./step.yml"}, {"import_tasks": "sub/a.yml"},
                                        {"import_tasks": "both.yml"}])
    write(role / "tasks" / "step.yml", [{"name": "step", "debug": {"msg": "step"}}])
    write(role / "tasks" / "sub" / "a.yml", [{"name": "a", "debug": {"msg": "a"}}, {"include_tasks": "b.yml"}])
    write(role / "tasks" / "sub" / "b.yml", [{"name": "b (beside a)", "debug": {"msg": "b"}}])
    write(role / "tasks" / "both.yml", [{"name": "both from tasks", "debug": {"msg": "tasks"}}])
    write(role / "both.yml", [{"name": "both from the role folder", "fail": {"msg": "not this one"}}])
    book = write(tmp_path / "pb.yml", play(roles=["r"]))
    _, steps, _, _ = same_as_ansible(book)
    assert ("r : both from tasks", "ok") in steps and ("r : b (beside a)", "ok") in steps


def test_outside_a_role_beside_the_including_file_then_the_playbooks_folder(tmp_path):
    write(tmp_path / "inc" / "a.yml", [{"name": "a", "debug": {"msg": "a"}}, {"include_tasks": "b.yml"},
                                       {"import_tasks": "top.yml"}])
    write(tmp_path / "inc" / "b.yml", [{"name": "b", "debug": {"msg": "b"}}])
    write(tmp_path / "top.yml", [{"name": "top", "debug": {"msg": "top"}}])
    book = write(tmp_path / "pb.yml", play([{"import_tasks": "inc/a.yml"}, {"include_tasks": "inc/a.yml"}]))
    same_as_ansible(book)


def test_a_roles_handler_includes_a_file_of_its_tasks_folder(tmp_path):
    """handler_addressing: a handler that includes runs what it includes when notified by its name (the include
    itself one ok result, as Ansible's); one that imports has no name to notify, in both tools refused."""
    role = tmp_path / "roles" / "h"
    write(role / "tasks" / "main.yml", [{"command": "true", "notify": ["do_include"]}])
    write(role / "handlers" / "main.yml", [{"name": "do_include", "include_tasks": "tasks/handlers.yml"}])
    write(role / "tasks" / "handlers.yml", [{"name": "handler task", "debug": {"msg": "include handler task"}}])
    book = write(tmp_path / "pb.yml", play([{"import_role": {"name": "h"}}]))
    theirs, mine = ansible(book), ours(book)
    assert theirs[1] == [("h : command", "changed"), ("h : do_include", "ok"), ("h : handler task", "ok")]
    assert mine[1] == theirs[1]
    write(role / "handlers" / "main.yml", [{"name": "do_include", "import_tasks": "tasks/handlers.yml"}])
    theirs, mine = ansible(book), ours(book)
    assert theirs[0] != 0 and mine[0] == 4 and "The requested handler 'do_include' was not found" in mine[2]["error"]
