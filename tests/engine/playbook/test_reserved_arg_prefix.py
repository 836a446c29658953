"""A task argument named `_ansible_*` is refused when the playbook loads, with ansible-playbook's words ("The
prefix '_ansible_' is reserved for internal use only"), which real ansible-playbook prints for the same file."""

from __future__ import annotations

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import local_inventory, real_ansible_playbook

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
    inv = local_inventory(tmp_path)
    proc = real_ansible_playbook(pb, inv)
    words = "The prefix '_ansible_' is reserved for internal use only"
    assert proc.returncode != 0 and words in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    ours = run_playbook(pb, inv)
    assert ours.exit_code == 4 and words in ours.error and "'_ansible_foo'" in ours.error, ours.error
