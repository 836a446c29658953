"""Fact gathering runs in every play that asks for it, as Ansible's default (`gathering: implicit`) runs it, and
counts once per such play in the recap; `meta: reset_connection` gathers nothing. Compared with real
ansible-playbook on a local host."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import ansible, ours, write


def test_each_play_with_gather_facts_gathers_again(tmp_path):
    plays = [
        {"hosts": "all", "gather_facts": True, "tasks": [{"debug": {"msg": "one"}}]},
        {"hosts": "all", "gather_facts": True, "tasks": [{"meta": "reset_connection"}, {"debug": {"msg": "two"}}]},
        {"hosts": "all", "gather_facts": False, "tasks": [{"debug": {"msg": "three"}}]},
    ]
    pb = write(tmp_path / "pb.yaml", plays)
    theirs, mine = ansible(pb), ours(pb)
    assert theirs[0] == 0 and theirs[2]["ok"] == 5, theirs
    assert (mine[0], mine[2], mine[3]) == (theirs[0], theirs[2], theirs[3])
