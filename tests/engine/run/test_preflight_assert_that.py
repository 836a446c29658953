"""assert's `that` holds conditionals (bare expressions, as `when`): a `{{ }}` inside one of their strings is not
a template the preflight may read a certainly-undefined variable from (engine/run/preflight.py). The run goes
on and the task fails or passes when it runs, as in real ansible-playbook, which both runs here check."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import both_succeed, local_inventory

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - assert:
        that: ["'{{ nope }}' | length == 10"]
      ignore_errors: true
    - assert:
        that: "1 == 1"
"""


def test_a_template_inside_a_that_string_is_not_refused_before_the_run(tmp_path):
    pb = tmp_path / "pb.yml"
    pb.write_text(PLAYBOOK)
    proc, ours = both_succeed(pb, pb, local_inventory(tmp_path))
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("h1 ") and "ok=" in line)
    counts = ours.recap["h1"]
    assert f"ok={counts['ok']} " in recap and f"ignored={counts['ignored']} " in recap, (recap, counts)
