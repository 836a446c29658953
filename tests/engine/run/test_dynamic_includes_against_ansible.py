"""Dynamic includes (include_tasks / include_role with a templated name or a loop, read when reached), run by real
ansible-playbook and by ours on local hosts: ansible-core's own include_import playbooks and setup_remote_tmp_dir
role, and playbooks written here (several hosts reaching different files, loops with loop_control, register,
apply, tags, a file that does not load). Each tool runs its own copy; exit codes and every host's recap must
match (the playbooks' asserts say what each construct gives)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from tests.ansible_targets.source import targets_dir
from tests.engine.run.includes_side import HOSTS, copy_target, inventory, same_as_ansible
from tests.helpers import required_ansible_tool

REPO = Path(__file__).resolve().parents[3]


def _hello_files(folder):
    """What include_import's runme.sh writes before test_copious_include_tasks.yml."""
    (folder / "tasks" / "hello").mkdir(exist_ok=True)
    for i in range(1, 40):
        (folder / "tasks" / "hello" / f"tasks-file-{i:03d}.yml").write_text(
            f"- name: Hello Message\n  debug:\n    msg: Task file {i:03d}\n")


@pytest.mark.parametrize("playbook, hosts, tags", [
    ("test_include_loop.yml", ("localhost",), ()),
    ("test_copious_include_tasks.yml", ("testhost",), ()),
    ("test_nested_tasks.yml", ("testhost",), ()),
    ("test_loop_var_bleed.yaml", ("localhost",), ()),
    ("test_null_include_filename.yml", ("localhost",), ()),
    ("apply/include_apply.yml", HOSTS, ("foo",)),
    ("undefined_var/playbook.yml", ("testhost",), ()),
    ("valid_include_keywords/playbook.yml", ("localhost",), ()),
    ("parent_templating/playbook.yml", ("localhost",), ()),
    ("tasks/test_include_tasks.yml", ("testhost",), ()),
    ("tasks/test_include_dupe_loop.yml", ("testhost",), ()),
])
def test_ansible_cores_include_import_playbooks(tmp_path, playbook, hosts, tags):
    folder = copy_target(tmp_path)
    _hello_files(folder)
    same_as_ansible(folder, playbook, hosts, tags)


def test_templated_static_import_names_render_at_load(tmp_path):
    """runme.sh's test_templated_filenames.yml: import_playbook, import_tasks and import_role's tasks_from named by
    -e, the import's vars and the play's vars."""
    folder = copy_target(tmp_path)
    code, recap = same_as_ansible(folder, "playbook/test_templated_filenames.yml", ("localhost",), extra_vars={
        "pb": "validate_templated_playbook.yml", "tasks": "validate_templated_tasks.yml", "tasks_from": "templated.yml"})
    assert code == 0 and recap["localhost"]["ok"] == 8


def test_setup_remote_tmp_dir_first_found_include(tmp_path):
    """The role most of ansible-core's targets use: `include_tasks: "{{ lookup('first_found', files) }}"` over names
    built from the host's own facts (a local host: the control node's answers), its handler an include_tasks."""
    folder = tmp_path / "srt"
    shutil.copytree(targets_dir() / "setup_remote_tmp_dir", folder / "roles" / "setup_remote_tmp_dir")
    (folder / "pb.yml").write_text(yaml.safe_dump([{
        "hosts": "testhost", "gather_facts": False, "roles": ["setup_remote_tmp_dir"],
        "tasks": [{"assert": {"that": ["remote_tmp_dir is defined", "remote_tmp_dir is exists"]}}]}]))
    code, recap = same_as_ansible(folder, "pb.yml")
    assert code == 0 and recap["testhost"]["changed"] == 2


def _write(folder, files: dict) -> None:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))


PLAY = """
- hosts: testhost,testhost2
  gather_facts: false
  vars:
    names: [one, two]
    candidates: [missing.yml, "{{ inventory_hostname }}.yml", common.yml]
  tasks:
    - name: per host file, from the inventory name through first_found
      include_tasks: "{{ lookup('first_found', candidates) }}"
    - name: a loop over an include, loop_control
      include_tasks: item.yml
      loop: "{{ names }}"
      loop_control: {loop_var: word, index_var: idx, extended: true}
      register: reached
    - assert:
        that:
          - reached.results | length == 2
          - reached.results[0].word == 'one'
          - seen == ['one-0-True', 'two-1-False']
    - name: templated name from an item, with_sequence
      include_tasks: "seq{{ item }}.yml"
      with_sequence: start=1 end=2
    - assert: {that: [seq_total | int == 3]}
    - block:
        - name: an include inside a block takes the block's when and vars
          include_tasks: "{{ 'blocked.yml' }}"
      when: inventory_hostname == 'testhost'
      vars: {from_block: yes}
    - name: an include's own when decides once; its tasks do not re-check it
      include_tasks: "{{ 'flip.yml' }}"
      when: not (flipped | default(false))
    - assert: {that: [flipped, after_flip]}
    - name: an include skipped by its when
      include_tasks: "{{ 'nope.yml' }}"
      when: false
      register: skipped_include
    - assert: {that: [skipped_include is skipped]}
    - name: include_role by a templated name, looped
      include_role: {name: "{{ item }}"}
      loop: [ra, rb]
      vars: {greeting: hello}
    - assert: {that: ["role_msgs == ['ra hello', 'rb hello']"]}
"""
FILES = {
    "testhost.yml": [{"set_fact": {"picked": "own"}}],
    "common.yml": [{"set_fact": {"picked": "common"}}],
    "item.yml": [{"set_fact": {"seen": "{{ seen | default([]) + [word ~ '-' ~ idx ~ '-' ~ ansible_loop.first] }}"}}],
    "seq1.yml": [{"set_fact": {"seq_total": "{{ (seq_total | default(0) | int) + 1 }}"}}],
    "seq2.yml": [{"set_fact": {"seq_total": "{{ (seq_total | default(0) | int) + 2 }}"}}],
    "blocked.yml": [{"assert": {"that": ["from_block", "inventory_hostname == 'testhost'"]}}],
    "flip.yml": [{"set_fact": {"flipped": True}}, {"set_fact": {"after_flip": True}}],
    "roles/ra/tasks/main.yml": [{"set_fact": {"role_msgs": "{{ role_msgs | default([]) + ['ra ' ~ greeting] }}"}}],
    "roles/rb/tasks/main.yml": [{"set_fact": {"role_msgs": "{{ role_msgs | default([]) + ['rb ' ~ greeting] }}"}}],
}


def test_templated_and_looped_includes_on_two_hosts(tmp_path):
    folder = tmp_path / "play"
    _write(folder, {"pb.yml": PLAY, **FILES})
    code, recap = same_as_ansible(folder, "pb.yml", HOSTS)
    assert code == 0 and recap["testhost"]["failed"] == 0


TAGS_PLAY = """
- hosts: testhost
  gather_facts: false
  tasks:
    - name: untagged include, tagged tasks inside
      include_tasks: "{{ 'tagged.yml' }}"
    - name: tagged include, untagged tasks inside
      include_tasks: "{{ 'plain.yml' }}"
      tags: [web]
    - name: apply gives the tags
      include_tasks:
        file: "{{ 'plain.yml' }}"
        apply: {tags: [web]}
      tags: [always]
    - name: static include, same rules
      include_tasks: plain.yml
      tags: [web]
"""


@pytest.mark.parametrize("tags", [(), ("web",)])
def test_an_includes_tags_are_its_own_unless_applied(tmp_path, tags):
    folder = tmp_path / "tags"
    _write(folder, {"pb.yml": TAGS_PLAY, "tagged.yml": [{"debug": {"msg": "t"}, "tags": ["web"]}],
                    "plain.yml": [{"debug": {"msg": "p"}}]})
    same_as_ansible(folder, "pb.yml", ("testhost",), tags)


def test_a_missing_file_fails_the_hosts_that_reached_it_and_a_bad_one_stops_the_run(tmp_path):
    """As Ansible: a file that is not there fails the hosts that reached it (the others go on); a file that does not
    parse stops the run, naming the file and the field."""
    folder = tmp_path / "bad"
    _write(folder, {"pb.yml": [{"hosts": "testhost,testhost2", "gather_facts": False, "tasks": [
        {"include_tasks": "{{ inventory_hostname }}.yml"}, {"debug": {"msg": "after"}}]}],
        "testhost.yml": [{"debug": {"msg": "fine"}}]})
    same_as_ansible(folder, "pb.yml", HOSTS)
    res = run_playbook(str(folder / "pb.yml"), inventory=inventory())
    (failure,) = [r for r in res.results if r.status == "failed"]
    assert failure.host == "testhost2" and "testhost2.yml" in failure.msg and "Could not find or access" in failure.msg, failure.msg
    _write(folder, {"testhost2.yml": [{"debug": {"msg": "x"}, "bogus_keyword": 1}]})
    shutil.rmtree(tmp_path / "bad-ansible")
    shutil.rmtree(tmp_path / "bad-ours")
    same_as_ansible(folder, "pb.yml", HOSTS)
    res = run_playbook(str(folder / "pb.yml"), inventory=inventory())
    assert res.exit_code == 4 and "testhost2.yml" in res.error and "bogus_keyword" in res.error, res.error


def _each_tool_prints(folder, playbook: str) -> dict[str, tuple[int, str]]:
    """{tool: (exit code, stdout and stderr)} of `ansible-playbook PLAYBOOK` as runme.sh runs it (no -i: only the
    implicit localhost), real ansible-playbook and ours (the targets' shim, the same `run_play` as `invoke play`),
    each on its own copy of `folder`."""
    out = {}
    for tool in ("ansible", "ours"):
        copy = folder.parent / f"{folder.name}-{tool}"
        shutil.copytree(folder, copy)
        command = [str(required_ansible_tool("ansible-playbook"))] if tool == "ansible" else [
            sys.executable, "-m", "tests.ansible_targets.ours_playbook"]
        env = {"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(copy), "ANSIBLE_INVENTORY": "/dev/null",
               "ANSIBLE_LOCAL_TEMP": str(copy / ".ansible-tmp"), "PYTHONPATH": str(REPO)}
        proc = subprocess.run([*command, playbook], capture_output=True, text=True, timeout=300, cwd=copy, env=env)
        out[tool] = (proc.returncode, proc.stdout + proc.stderr)
    return out


def _lines_with(text: str, pattern: str) -> int:
    return sum(bool(re.search(pattern, line)) for line in text.splitlines())


def test_a_file_missing_inside_a_plain_include_fails_the_host_when_reached(tmp_path):
    """runme.sh's test_nested_non_existent_tasks.yml (ansible#69882): a role imports a file whose plain include_tasks
    reads a file importing one that is not there. As Ansible's: the include_role is ok, the include fails the host
    when reached (exit 2, not a load error), and 'Could not find or access' is on three lines, as runme.sh counts."""
    by_tool = _each_tool_prints(copy_target(tmp_path), "test_nested_non_existent_tasks.yml")
    for tool, (code, out) in by_tool.items():
        assert code == 2, f"{tool}:\n{out}"
        assert re.search(r"^localhost\s+: ok=1\s+changed=0\s+unreachable=0\s+failed=1 ", out, re.M), f"{tool}:\n{out}"
        assert _lines_with(out, "Could not find or access") == 3, f"{tool}:\n{out}"


def test_an_include_naming_no_file_is_a_parser_error_with_its_origin(tmp_path):
    """runme.sh's test_null_include_filename.yml (ansible#83874): a file brought by an include holds an
    include_tasks without a file. Both tools stop (exit 4, no recap) with 'No file specified for
    ansible.builtin.include_tasks' and the Origin block quoting the task's line, each once, as runme.sh counts."""
    by_tool = _each_tool_prints(copy_target(tmp_path), "test_null_include_filename.yml")
    for tool, (code, out) in by_tool.items():
        assert code == 4 and "PLAY RECAP" not in out, f"{tool}:\n{out}"
        for pattern in ("No file specified for ansible.builtin.include_tasks", r"/null_filename/tasks.yml:4:3\b",
                        r"^4 - name: invalid include_task definition$", r"^    \^ column 3$"):
            assert _lines_with(out, pattern) == 1, f"{tool}: {pattern!r}\n{out}"
