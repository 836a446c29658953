"""Ansible's `gathering` setting (ANSIBLE_GATHERING, ansible.cfg's [defaults] gathering): `explicit` gathers facts
only for a play that asks (`gather_facts: true`); implicit (the default) gathers unless a play says false."""

from __future__ import annotations

import pytest

from engine.playbook.plays import load_playbook

PLAYBOOK = """\
- hosts: all
  tasks: []
- hosts: all
  gather_facts: true
  tasks: []
- hosts: all
  gather_facts: false
  tasks: []
"""


@pytest.mark.parametrize(("gathering", "expected"), [
    (None, [True, True, False]), ("implicit", [True, True, False]), ("explicit", [False, True, False]),
])
def test_gathering_decides_for_plays_that_do_not_say(tmp_path, monkeypatch, gathering, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    if gathering is None:
        monkeypatch.delenv("ANSIBLE_GATHERING", raising=False)
    else:
        monkeypatch.setenv("ANSIBLE_GATHERING", gathering)
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    assert [play.gather_facts for play in load_playbook(pb)] == expected


def test_ansible_cfg_sets_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ANSIBLE_GATHERING", raising=False)
    (tmp_path / "ansible.cfg").write_text("[defaults]\ngathering = explicit\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "ansible.cfg"))
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    assert [play.gather_facts for play in load_playbook(pb)] == [False, True, False]
