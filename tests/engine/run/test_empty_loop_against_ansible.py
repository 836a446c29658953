"""A loop over nothing is skipped (and counted so), with a host list inventory (`-i host,`) and `--connection
local`: the same recap and registered result as real ansible-playbook."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PLAY = """- hosts: all
  gather_facts: false
  tasks:
    - debug: {msg: "{{ item }}"}
      loop: []
      register: r
    - assert: {that: [r is skipped, "r.results == []", "r.skipped_reason == 'No items in the list'"]}
"""
ROOT = Path(__file__).resolve().parents[3]


def recap(out: str) -> str:
    return re.search(r"^localhost\s+:(.*)$", out, re.M).group(1).split()


def test_empty_loop_host_list_and_connection(tmp_path):
    book = tmp_path / "pb.yml"
    book.write_text(PLAY)
    args = ["-i", "localhost,", "-c", "local", str(book)]
    theirs = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), *args], capture_output=True,
                            text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1"})
    ours = subprocess.run([sys.executable, "-m", "tests.ansible_targets.ours_playbook", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert theirs.returncode == ours.returncode == 0, ours.stdout + ours.stderr
    assert recap(ours.stdout) == recap(theirs.stdout) == ["ok=1", "changed=0", "unreachable=0", "failed=0",
                                                          "skipped=1", "rescued=0", "ignored=0"]
