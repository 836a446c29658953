"""copy's registered diff has Ansible's shape: a list of one for a write (its action appends the content's
before/after), the file module's dict for a file left as it was, an empty list without --diff; against
ansible-playbook."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import same_as_ansible, write


def test_copy_registers_its_content_diff_as_ansible_does(tmp_path):
    dest = "{{ playbook_dir }}/f.txt"
    playbook = write(tmp_path / "play" / "pb.yml", [{"hosts": "all", "gather_facts": False, "tasks": [
        {"copy": {"content": "one\n", "dest": dest}, "diff": True, "register": "wrote"},
        {"debug": {"msg": "{{ wrote.diff | type_debug }} {{ wrote.diff[0].before == '' }} "
                          "{{ 'f.txt' in wrote.diff[0].after_header }} {{ wrote.diff[0].after }}"}},
        {"copy": {"content": "one\n", "dest": dest}, "diff": True, "register": "kept"},
        {"debug": {"msg": "{{ kept.diff | type_debug }}"}},
        {"copy": {"content": "two\n", "dest": dest}, "register": "quiet"},
        {"debug": {"msg": "quiet {{ quiet.diff | type_debug }} {{ quiet.diff | length }}"}},
        {"copy": {"content": "two\n", "dest": dest}, "register": "quiet_kept"},
        {"debug": {"msg": "quiet kept {{ quiet_kept.diff | default('none') | type_debug }}"}},
    ]}])
    _code, _steps, _recap, said = same_as_ansible(playbook)
    assert said == ["list True True one\n", "dict", "quiet list 0", "quiet kept list"]
