"""Where a role is found: roles/ beside the playbook, roles_path (ANSIBLE_ROLES_PATH, ansible.cfg), the playbook's
own folder, or a path (engine/playbook/roles.py find_role), as ansible-playbook finds it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.playbook.plays import load_playbook
from engine.playbook.roles import find_role


def _role(root: Path, name: str) -> Path:
    (root / name / "tasks").mkdir(parents=True)
    (root / name / "tasks" / "main.yml").write_text(f"- debug: msg=from-{name}\n")
    return root / name


@pytest.fixture
def layout(tmp_path, monkeypatch):
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    book = tmp_path / "plays" / "site.yml"
    book.parent.mkdir()
    _role(tmp_path / "shelf", "shelved")
    _role(book.parent, "beside")
    _role(tmp_path / "by_path", "pathed")
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles: [shelved, beside, ../by_path/pathed]\n")
    return book


def test_roles_path_playbook_folder_and_path(layout, monkeypatch):
    monkeypatch.setenv("ANSIBLE_ROLES_PATH", str(layout.parent.parent / "shelf"))
    play = load_playbook(layout)[0]
    assert [t.args.get("msg") for t in play.tasks] == ["from-shelved", "from-beside", "from-pathed"]


def test_ansible_playbook_finds_the_same(layout, monkeypatch):
    env = {"ANSIBLE_ROLES_PATH": str(layout.parent.parent / "shelf"), "PATH": "/usr/bin:/bin",
           "ANSIBLE_NOCOLOR": "1"}
    out = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          str(layout)], env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    assert [m for m in ("from-shelved", "from-beside", "from-pathed") if m in out] == ["from-shelved", "from-beside",
                                                                                         "from-pathed"]


def test_unknown_role_names_the_search(layout, monkeypatch):
    monkeypatch.delenv("ANSIBLE_ROLES_PATH", raising=False)
    with pytest.raises(UserError, match="unknown role 'shelved'"):
        find_role("shelved", layout, "site.yml: play 1")
