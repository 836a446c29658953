"""Play keywords written as templates (`strategy: "{{ test_strategy | default('linear') }}"`, hosts, gather_facts,
order, any_errors_fatal, max_fail_percentage, force_handlers, become): rendered from -e and the play's vars before
the play runs, as ansible-playbook renders them; compared with it on two local hosts. A rendered value the
keyword does not take is refused before any host is touched, as a written one is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

PLAYBOOK = """\
- hosts: "{{ target | default('all') }}"
  gather_facts: "{{ gf | default(false) }}"
  strategy: "{{ test_strategy | default('linear') }}"
  order: "{{ ord }}"
  any_errors_fatal: "{{ aef }}"
  max_fail_percentage: "{{ mfp }}"
  force_handlers: "{{ fh }}"
  become: "{{ bec }}"
  vars: {ord: reverse_sorted, aef: false, mfp: 50, fh: true, bec: false}
  tasks:
    - assert: {that: ["ansible_play_hosts == expected", "ansible_facts == {}"]}
- hosts: all
  gather_facts: false
  strategy: "{{ test_strategy | default('linear') }}"
  tasks:
    - debug: {msg: second}
"""
HOSTS = ("h1", "h2")
EXTRA = ["-e", "target=h2", "-e", "test_strategy=free", "-e", '{"expected": ["h2"]}']


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv"
    inv.write_text("".join(f"{h} ansible_connection=local ansible_python_interpreter={sys.executable}\n" for h in HOSTS))
    return inv


def test_templated_play_keywords_render_as_in_ansible_playbook(tmp_path):
    pb = tmp_path / "pb.yaml"
    pb.write_text(PLAYBOOK)
    inv = _inventory(tmp_path)
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(pb), *EXTRA],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(tmp_path),
                               "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    theirs = {h: int(ok) for h, ok in re.findall(r"^(h\d)\s*:\s*ok=(\d+)", proc.stdout, re.M)}
    ours = run_playbook(pb, inv, extra_vars={"target": "h2", "test_strategy": "free", "expected": ["h2"]})
    assert ours.exit_code == 0, ours.error or [t for t in ours.results if t.status == "failed"]
    assert {h: c["ok"] for h, c in ours.recap.items()} == theirs == {"h1": 1, "h2": 2}


@pytest.mark.parametrize("keyword, value, words", [
    ("strategy", "{{ 'bogus' }}", "'strategy' must be one of linear, free"),
    ("gather_facts", "{{ 'maybe' }}", "gather_facts"),
    ("order", "{{ nowhere }}", "'order' '{{ nowhere }}' does not render"),
])
def test_a_templated_play_keyword_that_renders_wrong_is_refused_before_any_host(tmp_path, keyword, value, words):
    pb = tmp_path / "pb.yaml"
    marker = tmp_path / "ran"
    pb.write_text(f"- hosts: all\n  {keyword}: \"{value}\"\n  tasks:\n    - file: {{path: '{marker}', state: touch}}\n")
    res = run_playbook(pb, _inventory(tmp_path))
    assert res.exit_code == 4 and words in res.error and "Traceback" not in res.error, res.error
    assert not marker.exists()
