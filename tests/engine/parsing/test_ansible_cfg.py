"""ansible.cfg and ANSIBLE_* settings, looked up where Ansible looks (engine/parsing/ansible_cfg.py)."""

from __future__ import annotations

import pytest

from engine.errors import UserError
from engine.parsing.ansible_cfg import config_file, roles_path, setting


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_ROLES_PATH", "ANSIBLE_FORCE_HANDLERS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_environment_wins_over_the_file_and_is_relative_to_cwd(clean_env, monkeypatch):
    (clean_env / "ansible.cfg").write_text("[defaults]\nroles_path = from_file\n")
    monkeypatch.setenv("ANSIBLE_ROLES_PATH", "../up:~/mine")
    assert roles_path() == [clean_env.parent / "up", clean_env / "home" / "mine"]


def test_cfg_in_the_current_folder_relative_to_the_file(clean_env, monkeypatch):
    conf = clean_env / "conf"
    conf.mkdir()
    (conf / "ansible.cfg").write_text("[defaults]\nroles_path = roles:/abs\nforce_handlers = True\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(conf / "ansible.cfg"))
    assert roles_path() == [conf / "roles", __import__("pathlib").Path("/abs")]
    assert setting("force_handlers") == "True"


def test_world_writable_cwd_is_not_read(clean_env):
    (clean_env / "ansible.cfg").write_text("[defaults]\nroles_path = x\n")
    assert config_file() == clean_env / "ansible.cfg"
    clean_env.chmod(0o777)
    try:
        assert config_file() is None and roles_path() == []
    finally:
        clean_env.chmod(0o755)


def test_a_broken_file_is_one_paragraph(clean_env):
    (clean_env / "ansible.cfg").write_text("roles_path = no section\n")
    with pytest.raises(UserError, match="ansible.cfg.*not a valid ansible.cfg"):
        setting("roles_path")
