"""ansible-core's own integration targets, run by real ansible-playbook and by ours (tests/ansible_targets/harness.py).

Each target must pass under ansible-playbook (else the harness, not the engine, is wrong), and docs/ANSIBLE.md's
table must hold the numbers measured here, for both tools: the claim is the measurement. A change that makes
more of them pass updates the table with `python -m tests.ansible_targets.measure --write-docs`."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.ansible_targets.docs_table import DOC, documented, readme_claim, totals
from tests.ansible_targets.harness import TARGETS, ansible_outcome, run_target, scratch_parent


@pytest.fixture
def scratch():
    path = Path(tempfile.mkdtemp(prefix="dfp-target-", dir=scratch_parent()))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.ansible_targets
@pytest.mark.parametrize("target", TARGETS)
def test_target_as_documented(target, scratch):
    tmp_path = scratch
    ansible = ansible_outcome(target, tmp_path / "ansible")
    ours = run_target(target, "ours", tmp_path / "ours")
    assert ansible.rc == 0, (  # a script target's own checks decide (some of its runs fail on purpose)
        f"{target} fails under real ansible-playbook (exit {ansible.rc}): the harness does not run it as "
        f"ansible-test does\n" + "\n".join(ansible.logs)[-4000:])
    expected = documented()[target]
    measured = {"ansible": ansible.passed, "ours": ours.passed, "ours_rc": ours.rc}
    assert measured == expected, (
        f"{target}: measured {measured}, docs/ANSIBLE.md says {expected}; if the engine improved, rewrite the "
        f"table with `python -m tests.ansible_targets.measure --write-docs`\n" + "\n".join(ours.logs)[-4000:])
    assert ours.passed <= ansible.passed


def test_readme_states_the_measured_totals():
    """README's numbers are docs/ANSIBLE.md's table summed (and that table is the measured one, above)."""
    table = documented()
    sums = totals(table)
    claim = readme_claim((DOC.parent.parent / "README.md").read_text())
    assert claim["targets"] == len(TARGETS) == len(table)
    assert {k: claim[k] for k in ("ansible", "ours", "whole")} == sums
    assert claim["percent_x10"] == round(1000 * sums["ours"] / sums["ansible"])


def test_the_shims_wait_is_the_harness_timeout():
    """ours_playbook.py keeps its own copy of the timeout (importing the harness would slow every run of ours)."""
    from tests.ansible_targets import harness, ours_playbook

    assert ours_playbook.TARGET_TIMEOUT_S == harness.TARGET_TIMEOUT_S
