"""Sections 1 and 2 of the benchmark: the same no-change workload on every tool, side by side.

Ours (whole CLI process, and run_playbook in-process for reference), ansible-playbook, pyinfra and raw
Fabric run on the same sshd hosts; repetitions are interleaved across tools so that a slow spell of the
shared machine hits all of them alike. Wall time and CPU (the tool's and the hosts' side) per run.
`bench` is the run's Bench (bench/run.py): its hosts, settings, and the notes/details/keys it fills.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

from bench import peers
from bench.figures import WORKLOAD_KEYS
from bench.timing import RunFailed, daemon_cpu, log, own_cpu, ratio, run_timed, stats, tree_cpu

ROOT = Path(__file__).resolve().parent.parent
PEER_TOOLS = ("ansible", "mitogen", "ansible_rs", "pyinfra")
# The tools whose recap says `changed=N`: a timed run of theirs must be a no-change run.
RECAP_TOOLS = ("ours_cli", "ours_direct", "ours_in_process", *peers.ANSIBLE_FLAVORS)
# The slow ones: fewer repetitions (bench.ansible_reps), no warm-up in a --quick run.
SLOW_TOOLS = ("ansible", "mitogen")


# -- pure helpers (tested as tables) ---------------------------------------------------------------


def no_change(output: str) -> bool:
    """True when a run's recap (ours or Ansible's: `changed=N` per host) shows no change on any host."""
    counts = [int(n) for n in re.findall(r"\bchanged=(\d+)", output)]
    return bool(counts) and not any(counts)


def median_of(details: dict, tool: str, n: int) -> float | None:
    entry = details.get(tool, {}).get(str(n))
    return entry["median"] if entry else None


def difference(whole: float | None, part: float | None) -> float | None:
    """What the CLI costs beyond the same run in process (s); None where a side is missing."""
    return round(whole - part, 3) if whole is not None and part is not None else None


def summarize(timings: dict) -> dict:
    """The headline ratios from {tool: {hosts: stats}} (medians). None where a side is missing."""
    ours = lambda n: median_of(timings, "ours_cli", n)  # noqa: E731
    direct = lambda n: median_of(timings, "ours_direct", n)  # noqa: E731
    return {
        "ansible_ratio_1": ratio(ours(1), median_of(timings, "ansible", 1)),
        "ansible_ratio_8": ratio(ours(8), median_of(timings, "ansible", 8)),
        "pyinfra_ratio_1": ratio(ours(1), median_of(timings, "pyinfra", 1)),
        "pyinfra_ratio_8": ratio(ours(8), median_of(timings, "pyinfra", 8)),
        "floor_ratio_1": ratio(ours(1), median_of(timings, "fabric", 1)),
        "floor_ratio_8": ratio(ours(8), median_of(timings, "fabric", 8)),
        "mitogen_ratio_1": ratio(ours(1), median_of(timings, "mitogen", 1)),
        "mitogen_ratio_8": ratio(ours(8), median_of(timings, "mitogen", 8)),
        "fanout_ratio_8": ratio(ours(8), ours(1)),
        "pyinfra_ratio_1_direct": ratio(direct(1), median_of(timings, "pyinfra", 1)),
        "pyinfra_ratio_8_direct": ratio(direct(8), median_of(timings, "pyinfra", 8)),
        "ansible_ratio_8_direct": ratio(direct(8), median_of(timings, "ansible", 8)),
        "cli_start_s": difference(ours(1), median_of(timings, "ours_in_process", 1)),
        "invoke_list_s": median_of(timings, "invoke_list", 1),
        "fanout_ratio_8_direct": ratio(direct(8), direct(1)),
        "fanout_ratio_16": ratio(ours(16), ours(1)),
        "fanout_ratio_8_in_process": ratio(median_of(timings, "ours_in_process", 8), median_of(timings, "ours_in_process", 1)),
        "fanout_ratio_16_in_process": ratio(median_of(timings, "ours_in_process", 16), median_of(timings, "ours_in_process", 1)),
    }


# -- the runners: one call = one timed no-change run of a tool on n hosts -----------------------------


def ours_cli(bench, n: int, direct: bool = False) -> tuple:
    """The CLI as a whole process: by default the later runs reuse the connection and the worker the first one
    left (ControlPersist=60s, the tool's default); direct: each run its own (ControlPersist=no)."""
    argv = peers.ours_argv(bench.our_inventory(n, direct=direct), bench.home, "ours", n)
    return run_timed(argv, cwd=str(ROOT))


def invoke_list() -> tuple:
    """The CLI's start alone: Invoke, our tasks.py and the option tables, no engine and no host."""
    return run_timed([sys.executable, "-m", "invoke", "--list"], cwd=str(ROOT))


def ours_in_process(bench, n: int) -> tuple:
    from engine.api import run_playbook

    started = time.perf_counter()
    res = run_playbook(
        ROOT / "bench" / "workload" / "ours.yaml",
        bench.our_inventory(n),
        extra_vars={"base": peers.workload_base(bench.home, "ours")},
        forks=max(8, n),
    )
    wall = time.perf_counter() - started
    if res.exit_code != 0:
        raise RunFailed(f"run_playbook exited {res.exit_code}: {res.error or res.tasks[-1:]}")
    changed = sum(c["changed"] for c in res.recap.values())
    return wall, f"changed={changed}"


def _add_ours_and_fabric(bench, runners: dict, versions: dict) -> None:
    if "ours" in bench.tools:
        for n in bench.sizes:
            runners[("ours_cli", n)] = lambda n=n: ours_cli(bench, n)
            runners[("ours_direct", n)] = lambda n=n: ours_cli(bench, n, direct=True)
            runners[("ours_in_process", n)] = lambda n=n: ours_in_process(bench, n)
        runners[("invoke_list", 1)] = invoke_list
    if "fabric" in bench.tools:
        for n in bench.peer_sizes:
            hf = peers.fabric_hosts_file(bench.tmp / f"fabric-{n}.json", bench.hosts(n))
            runners[("fabric", n)] = lambda hf=hf: peers.fabric_run(hf, bench.home)
        import fabric
        import paramiko

        versions["fabric"] = f"fabric {fabric.__version__}, paramiko {paramiko.__version__}"


def _add_peer_tools(bench, runners: dict, versions: dict, control_dir: Path) -> None:
    """Ansible (plain, with Mitogen, ansible-core-rs) and pyinfra, each installed on first use in its own
    environment; a note when it cannot be."""
    for tool in PEER_TOOLS:
        if tool not in bench.tools:
            continue
        exe = installed_peer(bench, tool, versions)
        for n in bench.peer_sizes if exe else ():
            runners[(tool, n)] = peer_runner(bench, tool, exe, bench.hosts(n), control_dir)


def installed_peer(bench, tool: str, versions: dict) -> Path | None:
    """The peer's executable (installed on first use) and its version noted; None and a note when it cannot be."""
    try:
        exe = peers.ensure_venv(tool, log=log)
        versions[tool] = peers.peer_version(exe)
        return exe
    except peers.PeerUnavailable as exc:
        bench.notes[tool] = f"{tool} could not be installed: {exc}"
        return None


def peer_runner(bench, tool: str, exe: Path, hosts: list, control_dir: Path, forks: int | None = None,
                timeout: float = 300):
    """A no-argument callable: one timed run of the peer on these hosts -> (wall s, output)."""
    n = len(hosts)
    if tool in peers.ANSIBLE_FLAVORS:
        inv = peers.ansible_inventory(bench.tmp / f"ansible-{n}.yaml", hosts)
        return lambda: peers.ansible_run(exe, inv, bench.home, control_dir, flavor=tool, forks=forks, timeout=timeout)
    inv = peers.pyinfra_inventory(bench.tmp / f"pyinfra-{n}.py", hosts)
    return lambda: peers.pyinfra_run(exe, inv, bench.home, timeout=timeout)


def section_peers(bench) -> None:
    runners: dict = {}
    versions: dict = {}
    _add_ours_and_fabric(bench, runners, versions)
    control_dir = bench.tmp / "ansible-cp"
    control_dir.mkdir(exist_ok=True)
    _add_peer_tools(bench, runners, versions, control_dir)
    bench.details["versions"] = versions
    try:
        time_interleaved(bench, runners)
    finally:
        peers.close_ansible_masters(control_dir)
        from engine.api import persist
        persist.stop()


# -- the timing ------------------------------------------------------------------------------------


def time_interleaved(bench, runners: dict) -> None:
    """Warm up, then time every runner in turn, repetition after repetition; fill keys, details, notes."""
    broken: dict = {}
    _seed_peer_folders(bench, runners)
    _warm_up(bench, runners, broken)
    samples, cpu = _repetitions(bench, runners, broken)
    for tool, why in broken.items():
        bench.notes[tool] = why
    bench.broken_peers.update(broken)
    timings: dict = {}
    for (tool, n), s in samples.items():
        if tool not in broken and s:
            timings.setdefault(tool, {})[str(n)] = stats(s)
    bench.details["workload"] = timings
    bench.details["workload_cpu"] = cpu_medians(cpu, timings)
    bench.keys.update(summarize(timings))
    bench.keys.update(host_cpu_per_host(bench.details["workload_cpu"], 8))
    for key in WORKLOAD_KEYS:
        if bench.keys.get(key) is None and key not in bench.notes:
            bench.notes[key] = "a side of this ratio did not run (see the other notes)"


def _seed_peer_folders(bench, runners: dict) -> None:
    """The end state every tool's workload makes (same folders, contents and modes), set up by the
    floor's script in each peer's folder: so even a first run of a peer is a no-change run."""
    peer_sizes = [n for t, n in runners if t in PEER_TOOLS]
    if peer_sizes:
        seed = peers.fabric_hosts_file(bench.tmp / "seed.json", bench.hosts(max(peer_sizes)))
        for tool in PEER_TOOLS:
            peers.fabric_run(seed, bench.home, tool)


def _warm_up(bench, runners: dict, broken: dict) -> None:
    """Each tool once on its largest host set (ours also places its runtime on the hosts).
    --quick skips Ansible's and Mitogen's (20-30 s on 8 hosts): their timed run is then a first, colder one."""
    for tool in sorted({t for t, _ in runners}):
        if tool in SLOW_TOOLS and bench.quick:
            continue
        biggest = max(n for t, n in runners if t == tool)
        log(f"warm-up: {tool} on {biggest} host(s)")
        try:
            runners[(tool, biggest)]()
        except Exception as exc:
            broken[tool] = f"{tool} failed in warm-up: {exc}"


def _repetitions(bench, runners: dict, broken: dict) -> tuple:
    """({(tool, n): [wall s]}, {(tool, n): [(control CPU s, host CPU s)]}); a tool that fails is broken."""
    samples: dict = {key: [] for key in runners if key[0] not in broken}
    cpu: dict = {key: [] for key in samples}
    listeners = [h.pid for h in bench.pool.hosts]
    rounds = max(bench.reps, bench.ansible_reps)
    for rep in range(rounds):
        log(f"repetition {rep + 1}/{rounds}")
        for key, fn in runners.items():
            tool, n = key
            if tool in broken or rep >= (bench.ansible_reps if tool in SLOW_TOOLS else bench.reps):
                continue
            try:
                wall, out, cost = _timed_once(fn, listeners)
            except Exception as exc:
                broken[tool] = f"{tool} failed on {n} host(s): {exc}"
                continue
            cpu[key].append(cost)
            if tool in RECAP_TOOLS and not no_change(out):
                bench.notes[f"{tool}_idempotent"] = f"{tool} reported changes in a timed run on {n} host(s)"
            samples[key].append(wall)
    return samples, cpu


def _timed_once(fn, listeners: list) -> tuple:
    """(wall s, output, (control CPU s, host CPU s)) of one run. The control side includes our kept-connection
    daemon's CPU in that time (it outlives the CLI, so the CLI's rusage lacks it)."""
    host0, ctl0 = tree_cpu(listeners), own_cpu(True) + own_cpu(False) + daemon_cpu()
    wall, out = fn()
    ctl = own_cpu(True) + own_cpu(False) + daemon_cpu() - ctl0
    time.sleep(0.05)  # let the sshd listeners reap the sessions that just ended
    return wall, out, (ctl, tree_cpu(listeners) - host0)


def host_cpu_per_host(workload_cpu: dict, n: int) -> dict:
    """The hosts' CPU per host and run (ms) of our CLI on n hosts, by default and with each run its own connection."""
    def per_host(tool: str) -> float | None:
        row = workload_cpu.get(tool, {}).get(str(n))
        return round(row["host_cpu_s"] / n * 1000, 1) if row else None

    return {f"host_cpu_ms_{n}": per_host("ours_cli"), f"host_cpu_ms_{n}_direct": per_host("ours_direct")}


def cpu_medians(cpu: dict, timings: dict) -> dict:
    """CPU seconds per run (medians): the tool's own processes, and the hosts' side (the sshd sessions and
    everything under them). All hosts share this machine's cores, so CPU bounds the fan-out."""
    return {
        tool: {
            str(n): {
                "control_cpu_s": round(statistics.median(c for c, _ in rows), 4),
                "host_cpu_s": round(statistics.median(h for _, h in rows), 4),
            }
            for (t, n), rows in cpu.items()
            if t == tool and rows
        }
        for tool in timings
    }
