"""Checking every variable before a host is touched must not refuse a playbook Ansible runs (issue 38).

Real playbooks of ansible-core's own integration targets (conditionals, blocks, handlers, set_fact), which read
variables set later, guarded by `is defined` / `default`, behind a `when`, in handlers and rescues, run with
real ansible-playbook and with ours: the same recap. A playbook reading undefined names in each place a task can
read them runs with both, and the failures carry ansible-core's own words. A name that is certainly undefined is
still refused before any host is touched."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.ansible_targets.source import targets_dir
from tests.helpers import required_ansible_tool

RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)\s+"
                   r"rescued=(\d+)\s+ignored=(\d+)", re.M)
FIELDS = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")


def _ansible(workdir: Path, playbook: str, inventory: Path, env: dict) -> tuple[int, dict, str]:
    tool = required_ansible_tool("ansible-playbook")
    proc = subprocess.run([str(tool), "-i", str(inventory), playbook], capture_output=True, text=True, timeout=600,
                          cwd=workdir, env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(workdir),
                                            "ANSIBLE_LOCAL_TEMP": str(workdir / ".tmp"), **env})
    recap = {m[0]: dict(zip(FIELDS, map(int, m[1:]))) for m in RECAP.findall(proc.stdout)}
    return proc.returncode, recap, proc.stdout[-3000:]


def _inventory(workdir: Path) -> Path:
    inv = workdir / "inventory.local"
    inv.write_text("".join(f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}\n"
                           for h in ("localhost", "testhost")))
    return inv


@pytest.mark.parametrize("target,playbook", [
    ("conditionals", "play.yml"),  # is defined / is undefined, `x is defined and ...`, a broken when under ignore_errors
    ("blocks", "issue71306.yml"),  # ansible_host read in a when (the connection's variable)
    ("blocks", "block_rescue_vars.yml"),  # ansible_failed_task / result in rescue
    ("blocks", "43191.yml"),
    ("blocks", "issue29047.yml"),
    ("handlers", "80880.yml"),
    ("set_fact", "set_fact_no_cache.yml"),  # debug var= of facts never set, `is undefined`
])
def test_a_target_playbook_runs_as_ansible_playbook_runs_it(tmp_path, monkeypatch, target, playbook):
    work = tmp_path / target
    shutil.copytree(targets_dir() / target, work)
    inv = _inventory(work)
    env = {"OUTPUT_DIR": str(work)}  # as the target's runme.sh has it
    code, theirs, out = _ansible(work, playbook, inv, env)
    assert theirs, out
    monkeypatch.chdir(work)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    ours = run_playbook(work / playbook, inv)
    assert ours.error == "" and {h: {k: c[k] for k in FIELDS} for h, c in ours.recap.items()} == theirs, (
        ours.error, ours.recap, theirs)
    assert (ours.exit_code == 0) == (code == 0)


GUARDS = """
- hosts: all
  gather_facts: false
  tasks:
    - debug: {msg: "{{ nope }}"}
      ignore_errors: true
      register: r_args
    - command: "echo {{ nope }}"
      args: {chdir: /}
      ignore_errors: true
      register: r_nested
    - debug: {msg: hi}
      when: nope
      ignore_errors: true
      register: r_when
    - debug: {msg: hi}
      loop: "{{ nope }}"
      ignore_errors: true
      register: r_loop
    - debug: {msg: hi}
      loop: "{{ nope }}"
      when: false
      register: r_loop_skipped
    - debug: {msg: "{{ via }}"}
      vars: {via: "{{ nope }}"}
      ignore_errors: true
      register: r_via
    - debug: {msg: "{{ nope }}"}
      when: nope is defined and nope
      register: r_guarded
    - debug: {msg: "{{ nope.x | default('d') }} {{ nope[other] | d('e') }} {{ later | default('f') }}"}
      register: r_default
    - block:
        - debug: {msg: "{{ nope }}"}
      rescue:
        - debug: {msg: "{{ ansible_failed_result.msg }}"}
          register: r_rescued
    - set_fact: {later: set}
    - debug: {msg: "{{ later }}"}
      register: r_later
    - copy: {content: "{{ results | to_json }}", dest: "{{ out }}"}
      vars:
        results:
          args: "{{ r_args.msg }}"
          when: "{{ r_when.msg }}"
          loop: "{{ r_loop.msg }}"
          loop_skipped: "{{ r_loop_skipped is skipped }}"
          via: "{{ r_via.msg }}"
          guarded: "{{ r_guarded is skipped }}"
          default: "{{ r_default.msg }}"
          rescued: "{{ r_rescued.msg }}"
          later: "{{ r_later.msg }}"
"""


def test_undefined_names_fail_their_tasks_with_ansibles_words(tmp_path, capsys):
    pb = tmp_path / "pb.yml"
    pb.write_text(GUARDS)
    inv = tmp_path / "inv"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    tool = required_ansible_tool("ansible-playbook")
    proc = subprocess.run([str(tool), "-i", str(inv), str(pb), "-e", f"out={tmp_path / 'theirs.json'}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    res = run_playbook(pb, inv, extra_vars={"out": str(tmp_path / "ours.json")})
    assert res.exit_code == 0, res.error
    assert (tmp_path / "ours.json").read_text() == (tmp_path / "theirs.json").read_text()
    warned = capsys.readouterr().err
    assert "variable 'nope' is not defined for h1" in warned and "'other'" not in warned, warned
    assert "'later'" not in warned, warned  # set by a later set_fact: nothing to say


@pytest.mark.parametrize("task", [
    {"debug": {"msg": "{{ nowhere }}"}},
    {"debug": {"msg": "hi"}, "when": "nowhere == 1"},
    {"debug": {"msg": "{{ via }}"}, "vars": {"via": "{{ nowhere | upper }}"}},
    {"command": "echo {{ 'a' if nowhere else 'b' }}"},
])
def test_a_certainly_undefined_name_is_refused_before_any_host(tmp_path, task):
    import yaml

    marker = tmp_path / "first-task-ran"
    pb = tmp_path / "pb.yml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"file": {"path": str(marker), "state": "touch"}}, task]}]))
    res = run_playbook(pb, {"all": {"hosts": {"h1": {"ansible_connection": "local",
                                                      "ansible_python_interpreter": sys.executable}}}})
    assert res.exit_code == 4 and "variable 'nowhere' is undefined" in res.error, res.error
    assert not marker.exists()


def test_a_broken_template_in_a_task_that_may_not_run_is_a_warning(tmp_path, capsys):
    pb = tmp_path / "pb.yml"
    pb.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - debug: {msg: '{{ 1 + }}'}\n"
                  "      ignore_errors: true\n")
    res = run_playbook(pb, {"all": {"hosts": {"h1": {"ansible_connection": "local",
                                                      "ansible_python_interpreter": sys.executable}}}})
    assert res.exit_code == 0 and res.recap["h1"]["ignored"] == 1, res.error
    assert "template syntax error" in capsys.readouterr().err
