"""Section "targets" of the benchmark: ansible-core's own integration targets, ours against ansible-playbook.

The targets both tools pass whole (tests/ansible_targets/: as ansible-test runs them, `ansible_connection:
local`) run by each tool in turn, bench.ansible_reps times; a target's time is its ansible-playbook runs from
start to exit, the folder's layout excluded. The targets are not idempotent (they make and remove their files
each run), so this is a run as written, every task doing its work, not a no-change run."""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench.timing import log, ratio, stats
from tests.ansible_targets.harness import TARGETS, ansible_outcome, run_target, scratch_parent


def _passing(root: Path) -> list[str]:
    """The targets both tools pass whole on this machine (a run of ours, ansible-playbook's kept outcome)."""
    chosen = []
    for target in TARGETS:
        ours = run_target(target, "ours", root / "probe-ours" / target)
        if ours.rc == 0 and ours.failed == 0:
            ansible = ansible_outcome(target, root / "probe-ansible" / target)
            if ansible.rc == 0 and ansible.passed == ours.passed:
                chosen.append(target)
    return chosen


def section_targets(bench) -> None:
    if bench.quick:
        bench.notes["targets"] = "--quick leaves out ansible-core's integration targets (minutes here)"
        return
    with tempfile.TemporaryDirectory(prefix="dfp-bench-targets-", dir=scratch_parent()) as tmp:
        root = Path(tmp)
        targets = _passing(root)
        samples: dict = {"ansible": [], "ours": []}
        for rep in range(max(3, bench.ansible_reps)):
            for tool in ("ansible", "ours"):
                runs = [run_target(t, tool, root / f"{tool}-{rep}" / t) for t in targets]
                samples[tool].append(sum(r.seconds for r in runs))
    timing = {tool: stats(s) for tool, s in samples.items()}
    timing["ratio"] = ratio(timing["ours"]["median"], timing["ansible"]["median"])
    bench.details["targets"] = dict(timing, targets=targets)
    bench.keys["targets_ansible_ratio"] = timing["ratio"]
    log(f"targets ({', '.join(targets)}): ours {timing['ours']['median']:.1f} s, ansible-playbook "
        f"{timing['ansible']['median']:.1f} s, ratio {timing['ratio']}")
