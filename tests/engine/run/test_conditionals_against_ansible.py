"""Conditionals as ansible-core 2.19 evaluates them (engine/run/conditionals.py): the cases of
conditionals_playbook.yaml run by real ansible-playbook and by ours, each task's status, the recap and the
messages compared; ALLOW_BROKEN_CONDITIONALS from ansible.cfg (Ansible) and from the environment or ansible.cfg
(ours); and ansible-core's own conditionals target's playbooks, which both tools must pass."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.ansible_targets.source import targets_dir
from tests.engine.playbook.ansible_side import HOST, INVENTORY, same_as_ansible, write

PLAYBOOK = Path(__file__).with_name("conditionals_playbook.yaml")

BROKEN = """
- hosts: all
  gather_facts: false
  vars:
    word: foo
    allowed: "{{ lookup('config', 'ALLOW_BROKEN_CONDITIONALS') }}"
  tasks:
    - name: a string's truth counts
      debug: {msg: ran}
      when: word
    - name: so does an empty conditional's
      debug: {msg: ran}
      when: "{{ '' }}"
    - name: and null's (an empty one)
      debug: {msg: ran}
      when: "{{ none }}"
    - debug: {msg: "allowed {{ allowed }}"}
"""


def test_conditionals_as_ansible_playbook(tmp_path):
    pb = tmp_path / "case" / "pb.yml"
    write(pb, PLAYBOOK.read_text())
    rc, steps, recap, said = same_as_ansible(pb)
    assert rc == 0 and recap["ignored"] == 14, (steps, recap)
    assert said.count("Task failed: Encountered untrusted template or expression.") == 5, said


def test_allow_broken_conditionals_in_ansible_cfg_as_ansible_playbook(tmp_path, monkeypatch):
    pb = tmp_path / "case" / "pb.yml"
    write(pb, BROKEN)
    (pb.parent / "ansible.cfg").write_text("[defaults]\nallow_broken_conditionals = true\n")  # each tool's own cwd
    monkeypatch.chdir(pb.parent)  # ours reads the ansible.cfg of its current folder (Ansible: of its cwd, the copy's)
    rc, steps, recap, said = same_as_ansible(pb)
    assert rc == 0 and [s for _, s in steps] == ["ok"] * 4 and said == ["ran"] * 3 + ["allowed True"], (steps, said)


def test_allow_broken_conditionals_from_the_environment(tmp_path, monkeypatch, capfd):
    pb = write(tmp_path / "pb.yml", BROKEN)
    refused = run_playbook(pb, INVENTORY)
    assert [r.status for r in refused.results] == ["failed"] and "must have a boolean result" in refused.results[0].msg
    monkeypatch.setenv("ANSIBLE_ALLOW_BROKEN_CONDITIONALS", "1")
    allowed = run_playbook(pb, INVENTORY)
    assert [r.status for r in allowed.results] == ["ok"] * 4, allowed.results
    assert allowed.results[-1].msg == "allowed True"
    err = capfd.readouterr().err
    assert f"[DEPRECATION WARNING]: Conditional result (True) was derived from value of type 'str' at '{pb}: task 1'" in err
    assert "`ALLOW_BROKEN_CONDITIONALS` configuration option is enabled" in err


def test_a_broken_changed_when_fails_the_task(tmp_path):
    """As Ansible 2.19: the module's result is kept (registered too), failed, the error under changed_when_result."""
    pb = write(tmp_path / "pb.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - command: 'true'\n"
                                     "      changed_when: out\n      vars: {out: yes please}\n      register: r\n"
                                     "      ignore_errors: true\n    - assert: {that: [r is failed, r.rc == 0]}\n")
    res = run_playbook(pb, INVENTORY)
    assert res.exit_code == 0 and res.results[0].status == "failed", res.results
    assert "Conditional result (True) was derived from value of type 'str'" in res.results[0].result["changed_when_result"]
    assert res.results[1].status == "ok", res.results[1].msg


def test_every_result_has_failed_and_changed(tmp_path):
    """Ansible's executor adds `failed` and `changed` to every result that ran: an action's reads `failed: false`."""
    pb = write(tmp_path / "pb.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - assert: {that: true}\n"
                                     "      register: r\n    - assert: {that: [r.failed == false, r.changed == false]}\n")
    res = run_playbook(pb, INVENTORY)
    assert res.exit_code == 0, [(r.task, r.msg) for r in res.results]


@pytest.mark.parametrize("playbook", ["play.yml", "output_validation_tests.yml", "broken_conditionals.yml"])
def test_ansible_cores_conditionals_target(tmp_path, monkeypatch, playbook):
    """The target's playbooks pass with ours as with ansible-playbook (runme.sh's runs, the environment's
    ALLOW_BROKEN_CONDITIONALS last); the failures they expect are ignored ones."""
    shutil.copytree(targets_dir() / "conditionals", tmp_path / "target")
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path))
    inventory = {"all": {"hosts": {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
                                   for name in (HOST, "testhost", "localhost")}}}
    runs = [{}] if playbook != "broken_conditionals.yml" else [{}, {"ANSIBLE_ALLOW_BROKEN_CONDITIONALS": "1"}]
    for env in runs:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        res = run_playbook(tmp_path / "target" / playbook, inventory)
        failed = [(r.task, r.msg) for r in res.results if r.status == "failed" and not r.ignored]
        assert res.exit_code == 0 and not failed, (env, res.error, failed)
