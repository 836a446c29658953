"""Ansible 2.19's TrustedAsTemplate, as this engine keeps it (engine/parsing/yamlfile.py is_written): a string the
playbook wrote stays trusted through set_fact and loops; one a template computed or a module returned does not.
And a looped task's failing item fails alone, the others still running (Ansible's _run_loop). Each playbook runs
with real ansible-playbook and with ours: the same steps, the same recap."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import ansible, ours, same_as_ansible, write

TAGGED = """
- hosts: all
  gather_facts: false
  vars:
    written: plain words
  tasks:
    - set_fact: {foo: bar, computed: "{{ 'b' ~ 'ar' }}"}
      register: baz
    - command: echo out
      register: out
      changed_when: false
    - assert:
        that:
          - baz.ansible_facts.foo is ansible._protomatter.tagged_with("TrustedAsTemplate")
          - foo is ansible._protomatter.tagged_with("TrustedAsTemplate")
          - written is ansible._protomatter.tagged_with("TrustedAsTemplate")
          - computed is not ansible._protomatter.tagged_with("TrustedAsTemplate")
          - out.stdout is not ansible._protomatter.tagged_with("TrustedAsTemplate")
"""

LOOPED = """
- hosts: all
  gather_facts: false
  tasks:
    - name: splat
      assert: '{{ item }}'
      loop:
        - that: "1 == {{ 1 }}"
        - that: 1 == 1
        - that: 1 == 2
      register: r
      ignore_errors: true
    - assert:
        that:
          - r is failed
          - r.results[0].msg is contains "untrusted"
          - r.results[1] is success and r.results[1].failed == false
          - r.results[2].msg is contains "Assertion failed"
    - name: a module's answer is no expression, on a local host either
      command: echo "1 == 1"
      register: out
      changed_when: false
    - debug: {msg: ran}
      when: "{{ out.stdout }}"
      ignore_errors: true
"""


def test_trusted_as_template_tag(tmp_path):
    rc, steps, _recap, _said = same_as_ansible(write(tmp_path / "case" / "pb.yml", TAGGED))
    assert rc == 0 and steps[-1] == ("assert", "ok"), steps


def test_a_loop_item_fails_alone_and_computed_conditions_are_untrusted(tmp_path):
    """Ansible shows a line per item, ours a line per task: the tasks' statuses and the recap compared."""
    runs = {}
    for tool, run in (("ansible", ansible), ("ours", ours)):
        rc, steps, recap, _said = run(write(tmp_path / tool / "pb.yml", LOOPED))
        runs[tool] = rc, list(dict.fromkeys(task for task, _ in steps)), recap
    assert runs["ours"] == runs["ansible"], runs
    assert runs["ours"][0] == 0 and runs["ours"][2]["ignored"] == 2, runs
