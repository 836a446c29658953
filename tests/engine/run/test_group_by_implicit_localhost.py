"""group_by on the implicit localhost puts it in the group (changed, in `groups`, found by a play on that group)
while 'all' still leaves it out, as ansible-playbook does (include_import's empty_group_warning)."""

from __future__ import annotations

import re

from engine.api import run_playbook
from tests.engine.playbook.ansible_side import real_ansible_playbook, write

PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - group_by:
        key: test_{{ inventory_hostname }}
      register: g
    - debug: {msg: "{{ g.changed }} {{ groups['test_localhost'] }}"}
- hosts: test_localhost
  gather_facts: false
  tasks:
    - debug: {msg: hello}
- hosts: all
  gather_facts: false
  tasks:
    - debug: {msg: all}
"""


def test_group_by_gives_the_implicit_localhost_a_group_as_ansible(tmp_path):
    pb = write(tmp_path / "pb.yml", PLAYBOOK)
    inv = write(tmp_path / "inv", "other ansible_connection=local\n")
    proc = real_ansible_playbook(pb, inv)
    theirs = {h: dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", rest))
              for h, rest in re.findall(r"^(\w+)\s*:\s*(ok=.*)$", proc.stdout.rpartition("PLAY RECAP")[2], re.M)}
    res = run_playbook(pb, inv)
    ours = {h: {k: int(v) for k, v in c.items() if k in theirs.get(h, {})} for h, c in res.recap.items()}
    assert res.exit_code == proc.returncode == 0 and ours == theirs, (res.error, ours, theirs, proc.stdout)
    shown = [r.msg for r in res.results if r.module == "debug"]
    assert shown == ["True ['localhost']", "hello", "all"]
