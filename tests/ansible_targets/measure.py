"""Measure ansible-core's integration targets with real ansible-playbook and with ours; print the table
docs/ANSIBLE.md holds.

    python -m tests.ansible_targets.measure [TARGET ...] [--tools ansible,ours] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.ansible_targets.docs_table import documented, totals, write, write_readme
from tests.ansible_targets.harness import TARGETS, TOOLS, Outcome, ansible_outcome, run_target, scratch_parent


def outcome(target: str, tool: str, workdir: Path) -> Outcome:
    return ansible_outcome(target, workdir) if tool == "ansible" else run_target(target, tool, workdir)


def measure(targets: tuple[str, ...], tools: tuple[str, ...], root: Path, jobs: int = 1) -> dict[str, dict[str, Outcome]]:
    jobs_list = [(t, tool) for t in targets for tool in tools]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        outcomes = list(pool.map(lambda job: outcome(job[0], job[1], root / job[1] / job[0]), jobs_list))
    table: dict[str, dict[str, Outcome]] = {}
    for done in outcomes:
        table.setdefault(done.target, {})[done.tool] = done
    return table


def markdown(table: dict[str, dict[str, Outcome]]) -> str:
    lines = ["| target | ansible-playbook | ours | % |", "|---|---|---|---|"]
    total_a = total_o = 0
    for target, by_tool in table.items():
        a, o = by_tool.get("ansible"), by_tool.get("ours")
        a_n, o_n = (a.passed if a else 0), (o.passed if o else 0)
        total_a, total_o = total_a + a_n, total_o + o_n
        pct = f"{100 * o_n / a_n:.0f} %" if a_n else "-"
        lines.append(f"| {target} | {a_n}{'' if not a or a.rc == 0 else f' (exit {a.rc})'} | "
                     f"{o_n}{'' if not o or o.rc == 0 else f' (exit {o.rc})'} | {pct} |")
    pct = f"{100 * total_o / total_a:.1f} %" if total_a else "-"
    lines.append(f"| **all** | **{total_a}** | **{total_o}** | **{pct}** |")
    stops = [f"- {t}: {shorten(o.stopped_by)}" for t, by in table.items() if (o := by.get("ours")) and o.stopped_by]
    if stops:
        lines += ["", "What stopped each target that does not pass whole, as the measurement met it first:", "", *stops]
    return "\n".join(lines)


def shorten(line: str, width: int = 300) -> str:
    """One error line for the docs: the scratch folder's paths cut to the target's own, at most `width` chars."""
    line = re.sub(r"/\S*/(?:ours|ansible)/\w+/(?:targets|roles)/", "", line)
    line = re.sub(r"/\S*/(?:ours|ansible)/\w+/", "", line).replace("|", "\\|")
    return "`" + (line if len(line) <= width else line[:width - 3] + "...").replace("`", "'") + "`"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.ansible_targets.measure")
    p.add_argument("targets", nargs="*", default=list(TARGETS))
    p.add_argument("--tools", default=",".join(TOOLS))
    p.add_argument("--json")
    p.add_argument("--keep", help="run in this folder and keep it (default: a temporary one)")
    p.add_argument("--jobs", type=int, default=1,
                   help="targets at once; above 1 only for targets that make no users (file and copy share one)")
    p.add_argument("--write-docs", action="store_true", help="write the table into docs/ANSIBLE.md")
    args = p.parse_args(argv)
    tools = tuple(args.tools.split(","))
    with tempfile.TemporaryDirectory(prefix="dfp-targets-", dir=scratch_parent()) as tmp:
        root = Path(args.keep or tmp)
        table = measure(tuple(args.targets), tools, root, args.jobs)
    print(markdown(table))
    if args.write_docs:
        write(markdown(table))
        write_readme(totals(documented()))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {t: {tool: o.as_dict() for tool, o in by.items()} for t, by in table.items()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
