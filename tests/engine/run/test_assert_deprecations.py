"""assert registers Ansible 2.19's `deprecations` for a condition written as a template (`'{{ 1 == 1 }}'`, also
inside a `that: "{{ checks }}"` list); the playbook's own asserts say so, and real ansible-playbook passes them too."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import both_succeed, local_inventory

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
    both_succeed(pb, pb, local_inventory(tmp_path))
