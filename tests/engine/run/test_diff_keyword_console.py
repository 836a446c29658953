"""A task with `diff: true` shows its diff without -D, as ansible-playbook does; a task without it does not.
Both tools run the same playbook; each one's output must show the added line for the `diff: true` task only."""

from __future__ import annotations

import io
import subprocess
import sys

from engine.api import run_playbook
from engine.report.console import Console
from tests.helpers import required_ansible_tool

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: shown
      lineinfile: {path: "{{ out }}/a.txt", line: "line-shown-by-diff", create: true}
      diff: true
    - name: not shown
      lineinfile: {path: "{{ out }}/a.txt", line: "line-not-shown"}
    - name: shown per item
      lineinfile: {path: "{{ out }}/b.txt", line: "{{ item }}", create: true}
      loop: [item-one-shown, item-two-shown]
      diff: true
"""


def test_the_diff_keyword_shows_the_diff_without_dash_d(tmp_path):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    inv = tmp_path / "inv"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    (tmp_path / "theirs").mkdir()
    (tmp_path / "ours").mkdir()
    tool = required_ansible_tool("ansible-playbook")
    proc = subprocess.run([str(tool), "-i", str(inv), str(pb), "-e", f"out={tmp_path / 'theirs'}"], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1",
                                                                     "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    stream = io.StringIO()
    res = run_playbook(pb, inv, extra_vars={"out": str(tmp_path / "ours")}, console=Console(stream=stream))
    assert res.exit_code == 0, res.error
    for shown in (proc.stdout, stream.getvalue()):
        assert "+line-shown-by-diff" in shown and "line-not-shown" not in shown, shown
        assert "+item-one-shown" in shown and "+item-two-shown" in shown, shown
