"""Section "parity" of the benchmark: Ansible's own playbooks, no change, ours against ansible-playbook.

The playbooks of the differential corpus (tests/ansible_parity/corpus/, written as Ansible users write them: FQCN
names, handlers, serial, run_once, delegate_to, includes, lookups, ...) run by both tools on the same sshd hosts,
each under its own folder: one run to converge, then timed no-change runs, interleaved. What it shows beside the
side-by-side workload: the ratio holds on playbooks that were not written for us.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench import peers
from bench.side_by_side import no_change
from bench.timing import RunFailed, log, ratio, run_timed, stats

CORPUS = peers.ROOT / "tests" / "ansible_parity" / "corpus"
CASES = {"habits": 2, "flow": 3}  # corpus playbook -> hosts (both end with exit 0 and converge)


def _argv(bench, tool: str, exe: Path, name: str, n: int) -> tuple[list, dict | None]:
    """The command line of one tool on one corpus playbook, and its environment."""
    base = f"{bench.home}/dfp-bench/parity-{tool}"
    book, limit = str(CORPUS / f"{name}.yaml"), ",".join(h.name for h in bench.hosts(n))
    if tool == "ansible":
        inv = peers.ansible_inventory(bench.tmp / f"parity-ansible-{n}.yaml", bench.hosts(n))
        argv = [str(exe), "-i", str(inv), book, "-l", limit, "-e", f"parity_base={base}"]
        return argv, dict(peers.ansible_env(bench.tmp / "parity-cp"), ANSIBLE_PIPELINING="True")
    inv = peers.ansible_inventory(bench.tmp / f"parity-ours-{n}.yaml", bench.hosts(n))
    return [sys.executable, "-m", "invoke", "play", book, "-i", str(inv), "-l", limit, "-e",
            f"parity_base={base}"], None


def _time_case(bench, exe: Path, name: str, n: int) -> dict:
    """Converge once, then bench.ansible_reps timed no-change runs of each tool, interleaved."""
    runs = {tool: _argv(bench, tool, exe, name, n) for tool in ("ansible", "ours")}
    for argv, env in runs.values():
        run_timed(argv, env=env, cwd=str(peers.ROOT))  # the first run makes the files
    samples: dict = {"ansible": [], "ours": []}
    for _ in range(max(3, bench.ansible_reps)):
        for tool, (argv, env) in runs.items():
            wall, out = run_timed(argv, env=env, cwd=str(peers.ROOT))
            if not no_change(out):
                raise RunFailed(f"{tool} reported changes on the corpus playbook {name}: not a no-change run")
            samples[tool].append(wall)
    timing = {tool: stats(s) for tool, s in samples.items()}
    timing["ratio"] = ratio(timing["ours"]["median"], timing["ansible"]["median"])
    log(f"parity: {name} on {n} hosts: ours {timing['ours']['median']:.2f} s, ansible-playbook "
        f"{timing['ansible']['median']:.2f} s, ratio {timing['ratio']}")
    return timing


def section_parity(bench) -> None:
    if bench.quick:
        bench.notes["parity"] = "--quick leaves out the corpus playbooks (about a minute here)"
        return
    exe = peers.ensure_venv("ansible", log=log)
    (bench.tmp / "parity-cp").mkdir(exist_ok=True)
    results: dict = {}
    try:
        for name, n in CASES.items():
            results[name] = dict(_time_case(bench, exe, name, n), hosts=n)
    finally:
        peers.close_ansible_masters(bench.tmp / "parity-cp")
    bench.details["parity"] = results
    bench.keys.update({f"parity_ansible_ratio_{name}": r["ratio"] for name, r in results.items()})
