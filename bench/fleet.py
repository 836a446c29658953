"""Section "fleet" of the benchmark: the no-change workload on 50 and 100 hosts, and the effect of --forks.

The hosts are a lighter sshd pool of their own (tests/sshd_harness.py: one sshd listening on up to 16
addresses of 127.0.0.x, `sshd -r` so a connection is a fork of the listener, not a fresh exec): 100
real SSH sessions on 7 daemons. Every "host" shares this machine's 2 cores with the control node, so
each run is measured three ways: wall time, the control node's CPU (the CLI process and its children,
from getrusage) and the hosts' CPU (the sshd listeners' process trees). On a real fleet each host has its
own CPU and only the control node's share stays, which is why the goal is on control CPU.

  ours: the CLI (`invoke play`) on 1, 50 and 100 hosts with the default --forks;
  forks: ours on 100 hosts with --forks 1, 8, 32, 100;
  peers (full run only, one run each): pyinfra, Ansible with Mitogen, ansible-core-rs and plain Ansible
  on 50, then 100 hosts, where they finish within PEER_TIMEOUT_S.
`bench` is the run's Bench (bench/run.py): its settings and the keys/details/notes it fills.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from bench import peers
from bench.side_by_side import _timed_once, installed_peer, no_change, peer_runner
from bench.timing import RunFailed, log, run_timed, stop_daemons

ROOT = Path(__file__).resolve().parent.parent
FLEET_SIZES = (50, 100)
FORKS = (1, 8, 32, 100)
QUICK_FORKS = (8, 32, 100)  # --quick leaves out --forks 1 (about 20 s on 100 hosts here)
DEFAULT_FORKS = 8  # the CLI's --forks default (dfp_cli/options.py)
PEER_FLEET_TOOLS = ("pyinfra", "mitogen", "ansible_rs", "ansible")
PEER_TIMEOUT_S = 300
PEER_FORKS = 8  # the Ansible flavours get the same forks as our default (Ansible's own default is 5)


# -- pure helpers (tested as tables) ---------------------------------------------------------------


def summarize_runs(n: int, runs: list[tuple]) -> dict:
    """Medians of (wall s, control CPU s, host CPU s) runs on n hosts, and CPU per host in ms."""
    wall, ctl, host = ([r[i] for r in runs] for i in range(3))
    med = {"wall_s": statistics.median(wall), "control_cpu_s": statistics.median(ctl), "host_cpu_s": statistics.median(host)}
    return {
        **{k: round(v, 3) for k, v in med.items()},
        "control_cpu_per_host_ms": round(med["control_cpu_s"] / n * 1000, 1),
        "host_cpu_per_host_ms": round(med["host_cpu_s"] / n * 1000, 1),
        "wall_min_s": round(min(wall), 3),
        "n": len(runs),
        "samples": [[round(x, 3) for x in r] for r in runs],
    }


def marginal_ms(one: dict | None, many: dict | None, n: int) -> float | None:
    """Control CPU one more host costs, in ms: (CPU on n hosts - CPU on 1 host) / (n - 1)."""
    if not one or not many or n <= 1:
        return None
    return round((many["control_cpu_s"] - one["control_cpu_s"]) / (n - 1) * 1000, 1)


def headline(ours: dict, forks: dict) -> dict:
    """The fleet keys of results.json from {hosts: summary} and {forks: summary} (None where not measured)."""
    get = lambda n, k: ours.get(str(n), {}).get(k)  # noqa: E731
    return {
        "fleet_50_wall_s": get(50, "wall_s"),
        "fleet_50_control_cpu_s": get(50, "control_cpu_s"),
        "fleet_100_wall_s": get(100, "wall_s"),
        "fleet_100_control_cpu_s": get(100, "control_cpu_s"),
        "fleet_100_host_cpu_s": get(100, "host_cpu_s"),
        "fleet_control_cpu_per_host_ms": marginal_ms(ours.get("1"), ours.get("100"), 100),
        "fleet_host_cpu_per_host_ms": get(100, "host_cpu_per_host_ms"),
        "forks_100_wall_s": {f: s["wall_s"] for f, s in forks.items()} or None,
        "forks_100_control_cpu_s": {f: s["control_cpu_s"] for f, s in forks.items()} or None,
    }


def direct_headline(direct: dict) -> dict:
    """The fleet keys of the runs on 100 hosts with each run its own connections (None where not measured)."""
    row = direct.get("100", {})
    return {"fleet_100_wall_s_direct": row.get("wall_s"), "fleet_100_control_cpu_s_direct": row.get("control_cpu_s"),
            "fleet_host_cpu_per_host_ms_direct": row.get("host_cpu_per_host_ms")}


# -- the section -----------------------------------------------------------------------------------


class Fleet:
    """One fleet section: its pool, inventories, and the timed runs."""

    def __init__(self, bench, pool) -> None:
        self.bench = bench
        self.pool = pool
        self.listeners = sorted({h.pid for h in pool.hosts})
        self.reps = 1 if bench.quick else 3

    def inventory(self, n: int, direct: bool = False) -> Path:
        from bench.run import DIRECT_VARS
        from tests.sshd_harness import write_inventory

        path = self.bench.tmp / f"fleet-ours-{n}{'-direct' if direct else ''}.yaml"
        if not path.exists():
            write_inventory(path, self.pool.hosts[:n], vars=DIRECT_VARS if direct else None)
        return path

    def ours_once(self, n: int, forks: int, warm_up: bool = False, direct: bool = False) -> tuple:
        """(wall, control CPU, host CPU) of one no-change CLI run on n hosts; RunFailed when it changed something
        (except in the warm-up, which may create the workload's folder)."""
        argv = peers.ours_argv(self.inventory(n, direct), self.bench.home, "ours", n, forks=forks)
        wall, out, (ctl, host) = _timed_once(lambda: run_timed(argv, cwd=str(ROOT)), self.listeners)
        if not warm_up and not no_change(out):
            raise RunFailed(f"ours reported changes on {n} hosts (forks {forks}): not a no-change run")
        return wall, ctl, host

    def ours(self) -> dict:
        log(f"fleet: warm-up, ours on {max(FLEET_SIZES)} hosts")
        self.ours_once(max(FLEET_SIZES), DEFAULT_FORKS, warm_up=True)
        out = {}
        for n in (1, *FLEET_SIZES):
            runs = [self.ours_once(n, DEFAULT_FORKS) for _ in range(self.reps)]
            out[str(n)] = summarize_runs(n, runs)
            log(f"fleet: ours on {n} hosts: {_line(out[str(n)])}")
        return out

    def direct(self) -> dict:
        """Ours on the largest fleet with each run its own connections (ControlPersist=no); the default runs
        before keep theirs (the daemon's CPU is in the control node's: bench/side_by_side.py _timed_once)."""
        n = max(FLEET_SIZES)
        self.ours_once(n, DEFAULT_FORKS, warm_up=True, direct=True)
        out = {str(n): summarize_runs(n, [self.ours_once(n, DEFAULT_FORKS, direct=True) for _ in range(self.reps)])}
        log(f"fleet: ours on {n} hosts, each run its own connections: {_line(out[str(n)])}")
        return out

    def forks(self) -> dict:
        n = max(FLEET_SIZES)
        out = {}
        for forks in FORKS if not self.bench.quick else QUICK_FORKS:
            runs = [self.ours_once(n, forks) for _ in range(max(1, self.reps - 1))]
            out[str(forks)] = summarize_runs(n, runs)
            log(f"fleet: ours on {n} hosts, --forks {forks}: {_line(out[str(forks)])}")
        return out

    def peers(self) -> dict:
        """Each peer on 50 then 100 hosts, once; a peer that fails or would not finish in time stops there."""
        bench, out = self.bench, {}
        control_dir = bench.tmp / "fleet-ansible-cp"
        control_dir.mkdir(exist_ok=True)
        try:
            for tool in PEER_FLEET_TOOLS:
                if tool not in bench.tools:
                    continue
                out[tool] = self._peer(tool, control_dir)
        finally:
            peers.close_ansible_masters(control_dir)
        return {t: v for t, v in out.items() if v}

    def _peer(self, tool: str, control_dir: Path) -> dict:
        bench = self.bench
        if tool in bench.broken_peers:
            bench.notes[f"fleet_{tool}"] = f"not run on the fleet: {bench.broken_peers[tool]}"
            return {}
        exe = installed_peer(bench, tool, bench.details.setdefault("versions", {}))
        if exe is None:
            return {}
        peers.fabric_run(peers.fabric_hosts_file(bench.tmp / "fleet-seed.json", self.pool.hosts[:1]), bench.home, tool)
        result: dict = {}
        for n in FLEET_SIZES:
            last = result.get(str(FLEET_SIZES[0]))
            if last and last["wall_s"] * n / FLEET_SIZES[0] > PEER_TIMEOUT_S:
                bench.notes[f"fleet_{tool}_{n}"] = (
                    f"{tool} not run on {n} hosts: {last['wall_s']:.0f} s on {FLEET_SIZES[0]} predicts more than "
                    f"{PEER_TIMEOUT_S} s")
                break
            forks = PEER_FORKS if tool in peers.ANSIBLE_FLAVORS else None
            fn = peer_runner(bench, tool, exe, self.pool.hosts[:n], control_dir, forks=forks, timeout=PEER_TIMEOUT_S)
            try:
                wall, output, (ctl, host) = _timed_once(fn, self.listeners)
            except Exception as exc:  # a failed task, a timeout: the reason goes into the notes
                bench.notes[f"fleet_{tool}_{n}"] = f"{tool} failed on {n} hosts: {str(exc)[-400:]}"
                break
            if tool in peers.ANSIBLE_FLAVORS and not no_change(output):
                bench.notes[f"fleet_{tool}_idempotent"] = f"{tool} reported changes on {n} hosts"
            result[str(n)] = summarize_runs(n, [(wall, ctl, host)])
            log(f"fleet: {tool} on {n} hosts: {_line(result[str(n)])}")
        return result


def _line(s: dict) -> str:
    return (f"wall {s['wall_s']:.2f} s, control CPU {s['control_cpu_s']:.2f} s "
            f"({s['control_cpu_per_host_ms']:.1f} ms/host), hosts' CPU {s['host_cpu_s']:.2f} s")


def section_fleet(bench) -> None:
    from tests.sshd_harness import SshdPool

    count = max(FLEET_SIZES)
    log(f"fleet: starting {count} sshd hosts (16 addresses per sshd, sshd -r) on 127.0.0.{bench.args.first_octet}..")
    pool = SshdPool(count=count, first_octet=bench.args.first_octet, per_daemon=16, reexec=False).start()
    fleet = Fleet(bench, pool)
    details: dict = {
        "pool": f"{count} hosts on {len(fleet.listeners)} sshd listeners (16 addresses each, sshd -r)",
        "default_forks": DEFAULT_FORKS,
        "repetitions": fleet.reps,
    }
    bench.details["fleet"] = details
    try:
        if "ours" in bench.tools:
            details["ours"] = fleet.ours()
            details["forks"] = fleet.forks()
            details["direct"] = fleet.direct()
            bench.keys.update(headline(details["ours"], details["forks"]))
            bench.keys.update(direct_headline(details["direct"]))
            for key in ("fleet_100_wall_s", "fleet_100_control_cpu_s"):
                if bench.keys[key] is None:
                    bench.notes[key] = f"the fleet section ran on {', '.join(map(str, FLEET_SIZES))} hosts, not 100"
        if bench.quick:
            bench.notes["fleet_peers"] = "--quick runs only ours on the fleet (the peers take minutes there)"
        else:
            details["peers"] = fleet.peers()
    finally:
        pool.stop()
        stop_daemons()
