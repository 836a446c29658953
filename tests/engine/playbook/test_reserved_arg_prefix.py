"""A task argument named `_ansible_*` is refused when the playbook loads, with ansible-playbook's words ("The
prefix '_ansible_' is reserved for internal use only"), which real ansible-playbook prints for the same file."""

from __future__ import annotations

import subprocess
import sys

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - set_fact:
        _ansible_foo: bar
      ignore_errors: true
"""


def test_an_argument_with_the_reserved_prefix_is_refused_at_load(tmp_path):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    inv = tmp_path / "inv"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(pb)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path),
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp")})
    words = "The prefix '_ansible_' is reserved for internal use only"
    assert proc.returncode != 0 and words in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    ours = run_playbook(pb, inv)
    assert ours.exit_code == 4 and words in ours.error and "'_ansible_foo'" in ours.error, ours.error
