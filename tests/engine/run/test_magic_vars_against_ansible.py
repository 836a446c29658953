"""Ansible's magic variables (inventory_file, inventory_dir, inventory_hostname_short, groups, group_names, omit,
playbook_dir, ansible_config_file, ansible_play_role_names / role_names, ansible_search_path, ansible_verbosity,
ansible_forks, ansible_inventory_sources, ansible_limit, ansible_playbook_python), written to a file by real
ansible-playbook and by ours on the same playbook and inventory: the files must be the same."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

MAGIC = ["inventory_hostname_short", "inventory_file", "inventory_dir", "groups", "group_names", "playbook_dir",
         "ansible_config_file", "ansible_play_role_names", "role_names", "ansible_search_path", "ansible_verbosity",
         "ansible_forks", "ansible_inventory_sources", "ansible_limit", "ansible_check_mode", "ansible_diff_mode",
         "ansible_play_hosts_all", "play_hosts"]
DUMP = "{{ {" + ", ".join(f"'{n}': {n}" for n in MAGIC) + ", 'python': ansible_playbook_python | realpath} | to_nice_json }}"

PLAYBOOK = f"""
- hosts: all
  gather_facts: false
  roles: [dumper]
  tasks:
    - name: the play's view
      copy:
        dest: "{{{{ out }}}}/{{{{ inventory_hostname }}}}.play.json"
        content: "{DUMP}"
    - name: an argument that renders to omit is left out
      file:
        path: "{{{{ out }}}}/{{{{ inventory_hostname_short }}}}.omit"
        state: touch
        mode: "{{{{ omit }}}}"
        owner: "{{{{ nobody_sets_this | default(omit) }}}}"
"""
ROLE_TASKS = f"""
- name: the role's view
  copy:
    dest: "{{{{ out }}}}/{{{{ inventory_hostname }}}}.role.json"
    content: "{DUMP}"
"""


def _tree(root: Path) -> Path:
    (root / "roles" / "dumper" / "tasks").mkdir(parents=True)
    (root / "roles" / "dumper" / "tasks" / "main.yml").write_text(ROLE_TASKS)
    (root / "pb.yml").write_text(PLAYBOOK)
    (root / "inv").mkdir()
    (root / "inv" / "hosts.ini").write_text(
        f"[db]\nlone ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        f"[web]\nweb1.example.com ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        "[db:children]\nweb\n")
    return root


def _dumps(out: Path) -> dict:
    return {p.name: (json.loads(p.read_text()) if p.suffix == ".json" else p.stat().st_size) for p in sorted(out.iterdir())}


def test_magic_variables_as_ansible_playbook(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    monkeypatch.chdir(root)  # no ansible.cfg here: ansible_config_file is None for both
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    theirs, ours = root / "theirs", root / "ours"
    theirs.mkdir()
    ours.mkdir()
    tool = required_ansible_tool("ansible-playbook")
    proc = subprocess.run([str(tool), "-i", "inv", "pb.yml", "-f", "3", "-l", "web1.example.com:lone", "-v",
                           "-e", f"out={theirs}"], capture_output=True, text=True, timeout=300, cwd=root,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(root),
                               "ANSIBLE_LOCAL_TEMP": str(root / ".tmp")})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    res = run_playbook(root / "pb.yml", root / "inv", forks=3, limit="web1.example.com:lone", verbose=1,
                       extra_vars={"out": str(ours)})
    assert res.exit_code == 0, res.error or [t for t in res.tasks if t.get("status") == "failed"]
    expected = _dumps(theirs)
    assert set(expected) == {f"{h}.{k}.json" for h in ("web1.example.com", "lone") for k in ("play", "role")} | {
        "web1.omit", "lone.omit"}
    assert _dumps(ours) == expected
    assert os.path.realpath(sys.executable) == expected["lone.play.json"]["python"]
