"""Module arguments written as templates (`assert: "{{ item }}"`, `debug: "{{ d }}"`, `args: "{{ d }}"`) and
set_fact's templated keys, run by real ansible-playbook and by ours: the same steps, statuses and recap (the
playbook's asserts check the messages: a wrong mapping fails that task or item with Ansible's words). Then the
trust rule: arguments a host's answer gave never choose a shell line or an expression."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import INVENTORY, ansible, ours, write

PLAYBOOK = Path(__file__).with_name("task_args_playbook.yaml")


def test_templated_arguments_and_set_fact_keys_as_ansible_playbook(tmp_path):
    pb = tmp_path / "play" / "pb.yaml"
    pb.parent.mkdir()
    pb.write_text(PLAYBOOK.read_text())
    theirs, mine = ansible(pb), ours(pb)
    assert mine[0] == theirs[0] == 0 and mine[2] == theirs[2], (theirs, mine)
    assert _tasks(mine[1]) == _tasks(theirs[1]), (theirs, mine)  # Ansible shows a line per loop item, ours one
    assert mine[2]["ignored"] == 6 and mine[2]["failed"] == 0, mine


def _tasks(steps: list) -> list:
    """The steps with a loop's item lines as one (each task's worst status)."""
    out: list = []
    for task, status in steps:
        if out and out[-1][0] == task:
            out[-1] = (task, "failed" if "failed" in (status, out[-1][1]) else status)
        else:
            out.append((task, status))
    return out


def _one_play(tmp_path: Path, tasks: list) -> Path:
    return write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": tasks}])


@pytest.mark.ssh
def test_a_shell_line_from_templated_arguments_built_from_host_data_is_refused(tmp_path, ssh_host, inventory_file,
                                                                               shared_tmp):
    pb = _one_play(tmp_path, [
        {"command": "echo '{\"cmd\": \"echo pwned\"}'", "register": "out"},
        {"name": "splat", "shell": None, "args": "{{ out.stdout | from_json }}"},
    ])
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: {"dfp_root": str(shared_tmp / "root")}})
    res = run_playbook(str(pb), inventory=str(inv))
    failed = [r for r in res.results if r.status == "failed"]
    assert [r.task for r in failed] == ["splat"], res.results
    assert "host data never runs as shell code" in failed[0].msg


def test_an_assert_expression_from_host_data_is_refused(tmp_path):
    """A module's output is never an expression (a local host's either: Ansible's untrusted-expression words)."""
    pb = _one_play(tmp_path, [
        {"command": "echo '{\"that\": \"1 == 1\"}'", "register": "out"},
        {"name": "splat", "assert": "{{ out.stdout | from_json }}"},
    ])
    res = run_playbook(str(pb), inventory=INVENTORY)
    failed = [r for r in res.results if r.status == "failed"]
    assert [r.task for r in failed] == ["splat"], res.results
    assert "Encountered untrusted template or expression" in failed[0].msg


def test_args_neither_mapping_nor_template_is_refused_at_load(tmp_path):
    pb = _one_play(tmp_path, [{"debug": None, "args": "msg=hi"}])
    res = run_playbook(str(pb), inventory=INVENTORY)
    assert res.exit_code == 4 and "'args' must be a mapping" in res.error, res.error
