"""The markdown results block of docs/BENCHMARKS.md, made from one run's results.json.

One small function per part of the block (headline table, per-tool tables, header inspection,
re-provision, cold provision, notes), so a new figure is added in one place; update_doc() swaps the
block of the run's mode into the page and leaves the hand-written text around it alone.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.figures import TARGETS, verdict

DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"
HEADLINE_LABELS = {
    "ansible_ratio_1": "ours / Ansible, 1 host (medians)",
    "ansible_ratio_8": "ours / Ansible, 8 hosts",
    "pyinfra_ratio_1": "ours / pyinfra, 1 host",
    "pyinfra_ratio_8": "ours / pyinfra, 8 hosts",
    "floor_ratio_1": "ours / raw Fabric, 1 host",
    "floor_ratio_8": "ours / raw Fabric, 8 hosts",
    "mitogen_ratio_1": "ours / Ansible with Mitogen, 1 host",
    "mitogen_ratio_8": "ours / Ansible with Mitogen, 8 hosts",
    "fanout_ratio_8": "fan-out: ours 8 hosts / 1 host",
    "fanout_ratio_16": "fan-out: ours 16 hosts / 1 host",
    "pyinfra_ratio_1_direct": "each run its own connection (ControlPersist=no): ours / pyinfra, 1 host",
    "pyinfra_ratio_8_direct": "each run its own connection: ours / pyinfra, 8 hosts",
    "ansible_ratio_8_direct": "each run its own connection: ours / Ansible, 8 hosts",
    "fanout_ratio_8_direct": "each run its own connection: fan-out 8 hosts / 1 host",
    "host_cpu_ms_8": "hosts' CPU per host and run, 8 hosts (ms)",
    "cli_start_s": "the CLI's own cost: `invoke play` on 1 host minus the same run in process (s)",
    "invoke_list_s": "`invoke --list`, the CLI's start alone (s)",
    "host_cpu_ms_8_direct": "each run its own connection: hosts' CPU per host and run, 8 hosts (ms)",
    "reprovision_s": "idempotent re-provision of `local` (s)",
    "ready_latency_s": "readiness latency (s)",
    "crash_latency_s": "crash detection latency (s)",
    "header_ms": "header-only drafter inspection, local (ms)",
    "cold_overhead_s": "cold provision overhead beyond install + vLLM (s)",
    "speed_repeat_apart": "speed verdict, two identical runs: largest ratio between their speed-ups (1 = same)",
    "fleet_50_wall_s": "fleet: ours on 50 hosts, wall (s)",
    "fleet_100_wall_s": "fleet: ours on 100 hosts, wall (s)",
    "fleet_100_control_cpu_s": "fleet: ours on 100 hosts, control-node CPU (s)",
    "fleet_control_cpu_per_host_ms": "fleet: control-node CPU per extra host (ms)",
    "fleet_host_cpu_per_host_ms": "fleet: hosts' CPU per host, 100 hosts (ms)",
    "fleet_100_wall_s_direct": "fleet, each run its own connections: ours on 100 hosts, wall (s)",
    "fleet_100_control_cpu_s_direct": "fleet, each run its own connections: 100 hosts, control-node CPU (s)",
    "fleet_host_cpu_per_host_ms_direct": "fleet, each run its own connections: hosts' CPU per host, 100 hosts (ms)",
    "models_relay_upstream_ratio": "models, 8 hosts: upstream bytes through the control node / each host on its own",
    "models_relay_wall_ratio": "models, 8 hosts: wall through the control node / each host on its own",
    "models_recheck_s": "models: no-change re-check of the whole repository, 1 host (s)",
    "targets_ansible_ratio": "ansible-core's targets as written (first run): ours / ansible-playbook",
    "targets_again_ansible_ratio": "ansible-core's targets run again, both tools ending alike: ours / ansible-playbook",
    "targets_no_change_ansible_ratio": "ansible-core's targets, no-change second run: ours / ansible-playbook",
    "targets_no_change_cold_ansible_ratio": "ansible-core's targets, no-change second run, each run of ours a process "
                                            "of its own (DFP_RESIDENT=0): ours / ansible-playbook",
}
# The tools of the workload tables, in the order of their rows.
TOOL_LABELS = {
    "ours_cli": "ours (`invoke play`, whole process; connections kept 60 s, the default)",
    "ours_direct": "ours (`invoke play`, each run its own connection: ControlPersist=no)",
    "ours_in_process": "ours (run_playbook in-process)",
    "invoke_list": "`invoke --list` (our CLI's start alone: no engine, no host)",
    "fabric": "raw Fabric (floor)",
    "pyinfra": "pyinfra",
    "mitogen": "ansible-playbook + Mitogen (mitogen_linear)",
    "ansible_rs": "ansible-core-rs (`ansible playbook`)",
    "ansible": "ansible-playbook",
}
FLEET_TOOL_LABELS = {"ours": "ours (`invoke play`, --forks 8)", "direct": "ours, each run its own connections (ControlPersist=no)",
                     **{t: TOOL_LABELS[t] for t in
                     ("pyinfra", "mitogen", "ansible_rs", "ansible")}}
WALL_INTRO = "Wall time of the 11-task no-change run, min / median seconds:"
CPU_INTRO = (
    "CPU per run, median milliseconds: the tool's own processes + the hosts' side (sshd sessions and "
    "all below them; every host shares this machine's cores):"
)


def fmt(v, unit: str = "") -> str:
    """A figure for a table: "n/a" when missing, 3 decimals below 10, 1 decimal above."""
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}{unit}" if abs(v) < 10 else f"{v:.1f}{unit}"
    return f"{v}{unit}"


def render_block(res: dict) -> str:
    """The markdown results block for one run: the headline table and the raw timings."""
    details = res.get("details", {})
    lines = made_by(res) + headline_table(res)
    lines += per_tool_table(details.get("workload", {}), WALL_INTRO, wall_cell)
    lines += per_tool_table(details.get("workload_cpu", {}), CPU_INTRO, cpu_cell)
    lines += fleet_lines(details.get("fleet"))
    lines += header_lines(details.get("header"))
    lines += reprovision_lines(details.get("reprovision", {}))
    lines += models_lines(details.get("models"))
    lines += targets_lines(details.get("targets"))
    lines += cold_lines(details.get("cold", {}))
    lines += notes_lines(res.get("notes"))
    return "\n".join(lines)


def made_by(res: dict) -> list[str]:
    """Which command made the figures, when, and on what machine (the figures mean little without it)."""
    m = res["machine"]
    return [
        f"Made by `{res['command']}` on {res['date']} ({res['mode']} run, {res['duration_s']} s; "
        f"{m['cpus']} CPUs, Python {m['python']}, load at end {m['load_avg_at_end']}).",
        "",
    ]


def headline_table(res: dict) -> list[str]:
    """One row per headline figure: value, target (where it has one) and verdict."""
    lines = ["| figure | value | target | verdict |", "|---|---|---|---|"]
    for key, label in HEADLINE_LABELS.items():
        target = TARGETS.get(key)
        shown_target = "<= " + fmt(round(target, 3)) if target else ""
        lines.append(f"| {label} | {fmt(res.get(key))} | {shown_target} | {verdict(key, res.get(key))} |")
    return lines


def wall_cell(s: dict) -> str:
    return f"{s['min']:.3f} / {s['median']:.3f}"


def cpu_cell(c: dict) -> str:
    return f"{c['control_cpu_s'] * 1000:.0f} + {c['host_cpu_s'] * 1000:.0f}"


def per_tool_table(per_tool: dict, intro: str, cell) -> list[str]:
    """A tool x host-count table of the workload runs ({tool: {"hosts": figures}}); nothing when empty.

    Wall time and CPU share this shape; `cell` turns one tool's figures on one host count into text.
    """
    if not per_tool:
        return []
    sizes = sorted({int(n) for figures in per_tool.values() for n in figures})
    lines = ["", intro, ""]
    lines.append("| tool | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in sizes) + " |")
    lines.append("|---|" + "---|" * len(sizes))
    for tool, label in TOOL_LABELS.items():
        if tool in per_tool:
            row = per_tool[tool]
            cells = [cell(row[str(n)]) if str(n) in row else "" for n in sizes]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def fleet_cell(s: dict) -> str:
    return (f"{s['wall_s']:.2f} s; {s['control_cpu_s']:.2f} + {s['host_cpu_s']:.2f} s CPU "
            f"({s['control_cpu_per_host_ms']:.0f} + {s['host_cpu_per_host_ms']:.0f} ms/host)")


def fleet_lines(fleet: dict | None) -> list[str]:
    """The fleet runs (50/100 hosts, ours and the peers) and ours on 100 hosts by --forks."""
    if not fleet or "ours" not in fleet:
        return []
    rows = {"ours": fleet["ours"], "direct": fleet.get("direct", {}), **fleet.get("peers", {})}
    sizes = sorted({int(n) for r in rows.values() for n in r})
    lines = ["", f"Fleet ({fleet['pool']}), no-change workload: wall; control-node CPU + hosts' CPU (per host), "
             f"medians of {fleet['repetitions']} run(s) for ours, one for the peers:", ""]
    lines.append("| tool | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in sizes) + " |")
    lines.append("|---|" + "---|" * len(sizes))
    for tool, label in FLEET_TOOL_LABELS.items():
        if tool in rows:
            lines.append(f"| {label} | " + " | ".join(fleet_cell(rows[tool][str(n)]) if str(n) in rows[tool] else ""
                                                   for n in sizes) + " |")
    forks = fleet.get("forks") or {}
    if forks:
        lines += ["", "Ours on 100 hosts by `--forks` (the default is 8):", "", "| --forks | wall | control CPU | hosts' CPU |",
                  "|---|---|---|---|"]
        lines += [f"| {f} | {s['wall_s']:.2f} s | {s['control_cpu_s']:.2f} s | {s['host_cpu_s']:.2f} s |" for f, s in forks.items()]
    return lines


def targets_lines(t: dict | None) -> list[str]:
    """ansible-core's targets run twice by each tool: per target each run's seconds and changed tasks, the second
    run's end (the figures sum the targets named under the table)."""
    if not t or "per_target" not in t:
        return []
    lines = ["", "ansible-core's integration targets, each run twice in one folder by each tool (bench/targets.py): "
             "seconds (changed tasks); the second run's exit and tasks passed:", "",
             "| target | ansible first | ours first | ansible again | ours again | again: exit, passed (ansible / ours) |",
             "|---|---|---|---|---|---|"]
    for target, by in t["per_target"].items():
        a, o = by["ansible"], by["ours"]
        cells = [f"{r[run]['seconds']:.1f} ({r[run]['changed']})" for run in ("first", "again") for r in (a, o)]
        lines.append(f"| {target} | " + " | ".join(cells) + f" | {a['again']['rc']}, {a['again']['passed']} / "
                     f"{o['again']['rc']}, {o['again']['passed']} |")
    lines.append("")
    for figure, label in (("first", "as written"), ("again", "again, ending alike"), ("no_change", "no-change"),
                          ("no_change_cold", "no-change, no resident control node (DFP_RESIDENT=0)")):
        if figure not in t:  # a result from before the cold figure
            continue
        f = t[figure]
        lines.append(f"- {label}: {', '.join(f['targets']) or 'none'}: ours {f['ours']} s, ansible-playbook "
                     f"{f['ansible']} s, ours / ansible-playbook {fmt(f['ratio'])}")
    return lines


def header_lines(header: dict | None) -> list[str]:
    """The drafter's size and the header-only inspection's time and bytes read, in-process, local, ssh."""
    if not header:
        return []
    d = header["drafter"]
    lines = [
        "",
        f"Header inspection: drafter declares {d['declared_bytes'] / 1e9:.2f} GB (fc.weight {d['fc_shape']} "
        f"BF16), header {d['header_bytes']} bytes, {d['allocated_bytes']} bytes allocated on disk.",
        "",
        "| where | time | bytes read |",
        "|---|---|---|",
    ]
    ip = header["in_process"]
    lines.append(
        f"| module in-process (check mode) | {ip['ms_median']:.2f} ms median | {ip['rchar_median']} (rchar; "
        f"header {ip['module_header_bytes_read']}) |"
    )
    for kind in ("local", "ssh"):
        if kind in header:
            h = header[kind]
            lines.append(
                f"| task via run_playbook, {kind} | {h['task_ms_median']:.2f} ms median (header read "
                f"{h['module_header_read_ms_median']:.2f} ms) | {h['worker_rchar_net_median']} (worker rchar, net of "
                f"the measuring; gross {h['worker_rchar_median']}) |"
            )
    return lines


def reprovision_lines(rp: dict) -> list[str]:
    """The idempotent re-provision: CLI median, and how much of it is our own code."""
    if not rp.get("cli"):
        return []
    return [
        "",
        f"Re-provision ({rp['server']}): {rp['cli']['median']:.2f} s median of {rp['cli']['n']} CLI runs, changed "
        f"{max(rp['changed_per_run'])}, {rp['tasks']} tasks; module time on the host {rp['host_module_s']:.2f} s, so "
        f"{rp['our_share_of_cli_wall']:.0%} of the CLI's wall is our own code (start-up included) and "
        f"{rp['our_share_of_in_process_wall']:.0%} of an in-process run's ({rp['in_process_wall_s']:.2f} s).",
    ]


def models_lines(m: dict | None) -> list[str]:
    """The models section: a repository to 8 hosts, direct and relayed; the re-check."""
    if not m:
        return []
    gib = 2**30
    d, r = m["direct"], m["relay"]
    return [
        "",
        f"Models ({m['repo_bytes'] / gib:.2f} GiB repository, olah upstream, {d['hosts']} sshd hosts on this machine): "
        f"each host on its own {d['wall_s']:.1f} s, {d['upstream_bytes'] / gib:.2f} GiB from the upstream; through the "
        f"control node {r['wall_s']:.1f} s, {r['upstream_bytes'] / gib:.2f} GiB from the upstream. No-change re-check on "
        f"one host {m['recheck']['wall_s']:.2f} s (stat only); with models_verify=full {m['full_verify']['wall_s']:.2f} s.",
    ]


def cold_lines(cold: dict) -> list[str]:
    """The cold provision split into its parts, against `vllm serve` run by hand."""
    if cold.get("total_s") is None or cold.get("vllm_own_s") is None:
        return []
    p = cold["parts"]
    return [
        "",
        f"Cold provision: {cold['total_s']:.1f} s = install {p['install']:.1f} + generate {p['generate']:.1f} + "
        f"vLLM role {p['vllm']:.1f} (module: ready in {cold.get('vllm_role_ready_s')} s) + other {p['other']:.2f}; "
        f"`vllm serve` by hand {cold['vllm_own_s']:.1f} s to /health 200 with empty caches "
        f"({cold['vllm_own_warm_cache_s']:.1f} s with the run's); beyond the module's own launch-to-ready: "
        f"{cold.get('overhead_vs_role_ready_s')} s.",
    ]


def notes_lines(notes: dict | None) -> list[str]:
    """Why a figure is missing or suspect, one bullet per note."""
    if not notes:
        return []
    return ["", "Notes:", ""] + [f"- `{k}`: {v}" for k, v in sorted(notes.items())]


def update_doc(res: dict, doc: Path = DOC) -> None:
    """Replace this mode's results block in docs/BENCHMARKS.md (the rest of the page is hand-written)."""
    begin, end = f"<!-- bench-results:{res['mode']}:begin -->", f"<!-- bench-results:{res['mode']}:end -->"
    block = f"{begin}\n{render_block(res)}\n{end}"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + f"\n\n## Latest {res['mode']} run\n\n{block}\n"
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, doc)
