"""assert registers Ansible 2.19's `deprecations` for a condition written as a template (`'{{ 1 == 1 }}'`, also
inside a `that: "{{ checks }}"` list); the playbook's own asserts say so, and real ansible-playbook passes them too."""

from __future__ import annotations

import subprocess
import sys

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - assert: {that: '{{ thats }}'}
      vars: {thats: ['{{ 1 == 1 }}', 'x is defined or True'], x: 1}
      register: listed
    - assert: {that: '{{ 1 == 1 }}'}
      register: single
    - assert: {that: '1 == 1'}
      register: plain
    - assert:
        that:
          - listed.deprecations | length == 1
          - listed.deprecations[0].msg is contains "should not be surrounded by templating delimiters"
          - single.deprecations[0].version == "2.23"
          - plain.deprecations is undefined
"""


def test_templated_conditions_register_their_deprecation_as_ansible_playbook(tmp_path):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    inv = tmp_path / "inv"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(pb)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path),
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp")})
    assert proc.returncode == 0, proc.stdout[-3000:]
    ours = run_playbook(pb, inv)
    assert ours.exit_code == 0, ours.error or [t for t in ours.tasks if t.get("status") == "failed"]
