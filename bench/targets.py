"""Section "targets" of the benchmark: ansible-core's own integration targets, ours against ansible-playbook.

The targets both tools pass whole (tests/ansible_targets/: as ansible-test runs them, `ansible_connection:
local`) run by each tool twice in one folder: the first run in a fresh folder (the target as written, every task
doing its work), then the same target again at once, in the folder the first left (what the first made is
there: a task that finds its work done reports no change). A run's time is its ansible-playbook runs from start
to exit, the folder's layout excluded.

The targets are tests, not idempotent playbooks: command/shell tasks change every time, some files are removed
and made again, and a few asserts expect a change, so only some targets' second run is a no-change run. Three
figures: the first runs (as written), the second runs of the targets whose second run both tools end alike
(same exit, tasks passed, failed and changed), and the no-change run: the second runs that pass with no task
changed in either tool. Each target's counts are in details, so which targets changed what is on record.

Ours runs as the targets' scripts call it: `ansible-playbook` is this project's ansible-playbook front
(dfp_cli/ansible_playbook/), whose resident control node serves the runs. A fourth figure, no_change_cold, runs
the no-change targets again with it turned off (DFP_RESIDENT=0), each run a python start and the engine's imports."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from bench.timing import compile_tree, log, ratio
from tests.ansible_targets.harness import (
    TARGETS,
    Outcome,
    _run,
    ansible_outcome,
    authorized_keys,
    count,
    environment,
    is_script_target,
    lay_out,
    role_playbook,
    run_target,
    scratch_parent,
)

RUNS = ("first", "again")


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


def changed(outcome: Outcome) -> int:
    """The tasks changed, summed over each run's PLAY RECAP (harness.recount sums ok and failed)."""
    total = 0
    for text in outcome.logs:
        recap = text[text.rfind("PLAY RECAP"):] if "PLAY RECAP" in text else ""
        total += sum(int(n) for n in re.findall(r"\bchanged=(\d+)", recap))
    return total


def run_twice(target: str, tool: str, workdir: Path) -> dict[str, Outcome]:
    """`target` laid out once in `workdir` and run by `tool` twice there, as the harness runs it (its
    run_target, whose layout would start the second run afresh), each run's logs in a folder of its own."""
    target_dir = lay_out(target, workdir)
    env = environment(tool, workdir)
    if is_script_target(target_dir):
        command, cwd = ["bash", "./runme.sh"], target_dir
    else:
        command, cwd = ["ansible-playbook", "-i", str(workdir / "inventory"),
                        str(role_playbook(target, workdir, target_dir))], workdir
    done = {}
    for run in RUNS:
        logs = workdir / f"logs-{run}"
        logs.mkdir()
        start = time.monotonic()
        with authorized_keys():
            rc = _run(command, cwd, {**env, "DFP_TARGET_LOGS": str(logs)})
        done[run] = count(target, tool, rc, time.monotonic() - start, logs)
    return done


def summary(outcome: Outcome) -> dict:
    return {"rc": outcome.rc, "passed": outcome.passed, "failed": outcome.failed, "changed": changed(outcome),
            "runs": outcome.runs, "seconds": outcome.seconds}


def kinds(per_target: dict) -> dict[str, list[str]]:
    """Which targets each figure sums: every target for the first run; for the second, those both tools end
    alike, and of them those that pass with nothing changed (the no-change run)."""
    def ended(tool_runs: dict) -> dict:
        return {k: v for k, v in tool_runs["again"].items() if k != "seconds"}

    alike = [t for t, by in per_target.items() if ended(by["ansible"]) == ended(by["ours"])]
    unchanged = [t for t in alike if per_target[t]["ours"]["again"]["rc"] == 0
                 and per_target[t]["ours"]["again"]["changed"] == 0]
    return {"first": list(per_target), "again": alike, "no_change": unchanged}


def measure(targets: list[str], root: Path) -> tuple[dict, dict]:
    """(per target {tool: {run: summary}}, {figure: {targets, ansible, ours, ratio}}) of both tools' two runs."""
    per_target: dict = {}
    for target in targets:  # ansible-playbook's two runs of every target take about 40 minutes here
        per_target[target] = {tool: {run: summary(o) for run, o in run_twice(target, tool, root / tool / target).items()}
                              for tool in ("ansible", "ours")}
        log(f"targets: {target}: {per_target[target]}")
    figures = figures_of(per_target)
    for figure, f in figures.items():
        log(f"targets, {figure} run ({', '.join(f['targets'])}): ours {f['ours']} s, ansible-playbook {f['ansible']} s, "
            f"ours / ansible-playbook {f['ratio']}")
    return per_target, figures


def figures_of(per_target: dict) -> dict:
    """{figure: {targets, ansible, ours (seconds summed), ratio (ours / ansible)}} for each of kinds' figures."""
    figures: dict = {}
    for figure, chosen in kinds(per_target).items():
        run = "first" if figure == "first" else "again"
        seconds = {tool: round(sum(per_target[t][tool][run]["seconds"] for t in chosen), 1) for tool in ("ansible", "ours")}
        figures[figure] = {"targets": chosen, **seconds, "ratio": ratio(seconds["ours"], seconds["ansible"])}
    return figures


def cold_no_change(figures: dict, root: Path) -> dict:
    """The no-change figure again with ours' runs each in a process of its own (DFP_RESIDENT=0: no resident control
    node, a python start and the engine's imports every run): {targets, ansible, ours, ratio}."""
    chosen = figures["no_change"]["targets"]
    previous = os.environ.get("DFP_RESIDENT")
    os.environ["DFP_RESIDENT"] = "0"
    try:
        seconds = sum(run_twice(t, "ours", root / "ours-cold" / t)["again"].seconds for t in chosen)
    finally:
        if previous is None:
            os.environ.pop("DFP_RESIDENT")
        else:
            os.environ["DFP_RESIDENT"] = previous
    ansible = figures["no_change"]["ansible"]
    return {"targets": chosen, "ansible": ansible, "ours": round(seconds, 1), "ratio": ratio(round(seconds, 1), ansible)}


def section_targets(bench) -> None:
    if bench.quick:
        bench.notes["targets"] = "--quick leaves out ansible-core's integration targets (minutes here)"
        return
    with tempfile.TemporaryDirectory(prefix="dfp-bench-targets-", dir=scratch_parent()) as tmp:
        root = Path(tmp)
        per_target, figures = measure(_passing(root), root)  # one repetition (40 minutes of ansible-playbook)
        figures["no_change_cold"] = cold_no_change(figures, root)
    bench.details["targets"] = {"per_target": per_target, **figures}
    bench.keys["targets_ansible_ratio"] = figures["first"]["ratio"]
    bench.keys["targets_again_ansible_ratio"] = figures["again"]["ratio"]
    bench.keys["targets_no_change_ansible_ratio"] = figures["no_change"]["ratio"]
    bench.keys["targets_no_change_cold_ansible_ratio"] = figures["no_change_cold"]["ratio"]


def main(argv: list[str]) -> int:
    """`python -m bench.targets [--ours] TARGET...`: the section's two runs on the targets named (no check that
    both tools pass them), printed; for a figure on a few targets without the whole benchmark. --ours: ours alone
    (which targets' second run changes nothing, in minutes instead of ansible-playbook's 40)."""
    ours_only = "--ours" in argv
    targets = [a for a in argv if a != "--ours"] or list(TARGETS)
    compile_tree(Path(__file__).resolve().parent.parent)  # as the benchmark's run does first (timing.py says why)
    with tempfile.TemporaryDirectory(prefix="dfp-bench-targets-", dir=scratch_parent()) as tmp:
        if ours_only:
            for target in targets:
                runs = run_twice(target, "ours", Path(tmp) / "ours" / target)
                print(json.dumps({target: {run: summary(o) for run, o in runs.items()}}), flush=True)
            return 0
        per_target, figures = measure(targets, Path(tmp))
        figures["no_change_cold"] = cold_no_change(figures, Path(tmp))
    log(f"targets, no-change run with no resident control node: {figures['no_change_cold']}")
    print(json.dumps({"per_target": per_target, **figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
