"""The `remote_user` keyword (task, block, import, play): on local hosts it changes nothing, as in Ansible
(compared with real ansible-playbook, tests/engine/run/test_play_flow.py); on an ssh host without ansible_user a
login user other than this run's one is refused with the fix (engine/connection/login.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.connection.login import check_remote_user
from engine.errors import TaskError
from tests.engine.run.test_play_flow import log_task, same


def test_remote_user_changes_nothing_on_local_hosts(tmp_path):
    play = {"hosts": "all", "remote_user": "nobody", "tasks": [
        log_task("task", remote_user="{{ 'nobody' }}"),
        {"block": [log_task("block")], "remote_user": "root"}]}
    seq = same(tmp_path, play)
    assert seq == {h: ["task", "block"] for h in "abc"}


class _Templar:
    def render_value(self, value, view):
        return value


def _task(user):
    return SimpleNamespace(remote_user=user, source="p.yml: task 1", name="t")


def test_an_ssh_host_refuses_another_login_without_ansible_user():
    host = SimpleNamespace(connection="ssh", user=None, name="h")
    with pytest.raises(TaskError, match="set ansible_user: someone-else"):
        check_remote_user(_task("someone-else"), host, {}, _Templar())


def test_ansible_user_wins_over_the_keyword():
    host = SimpleNamespace(connection="ssh", user="deploy", name="h")
    check_remote_user(_task("someone-else"), host, {}, _Templar())
