"""The vars written with an import_playbook are the imported plays' vars already while those plays load, so a
static name there (import_role, import_tasks) may read them, as Ansible's (include_import's
playbook_needing_vars.yml); compared with real ansible-playbook."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import same_as_ansible, write


def test_an_imported_plays_import_role_name_reads_the_import_playbooks_vars(tmp_path):
    book = tmp_path / "pb" / "main.yml"
    write(book, [{"import_playbook": "inner.yml", "vars": {"role_name": "greet", "file_name": "more.yml",
                                                           "shown": "from_import"}}])
    write(book.parent / "inner.yml", [{"hosts": "all", "gather_facts": False, "vars": {"shown": "from_play"},
                                       "tasks": [{"import_role": {"name": "{{ role_name }}"}},
                                                 {"import_tasks": "{{ file_name }}"}]}])
    write(book.parent / "more.yml", [{"name": "more", "debug": {"msg": "more {{ shown }}"}}])
    write(book.parent / "roles" / "greet" / "tasks" / "main.yml", [{"name": "hello", "debug": {"msg": "hello"}}])
    code, steps, _, said = same_as_ansible(book)
    assert code == 0 and said == ["hello", "more from_import"], steps
