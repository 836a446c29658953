"""`invoke bench [--quick]`: our engine against Ansible, pyinfra and raw Fabric, and its own latencies.

Side by side in one run on this machine (issue #7), written to bench/results.json and to the results
block of docs/BENCHMARKS.md:
  1. the same 11-task no-change workload, ours (whole CLI process, and run_playbook in-process for
     reference) vs ansible-playbook vs pyinfra vs raw Fabric, on 1 and 8 real sshd hosts, host keys
     checked in all; repetitions interleaved across tools, min and median;
  2. fan-out: ours on 8 and 16 hosts divided by 1 host;
  3. idempotent re-provision of the `local` host (when the provision playbook exists and the server is up);
  4. readiness and crash detection latency against the stand-in server (when it and the module exist);
  5. header-only inspection of a sparse multi-GB drafter, locally and over SSH;
  6. cold local provision vs `vllm serve` alone (full run only).
A part that cannot run is null in results.json with the reason under "notes".

Usage: python bench/run.py [--quick] [--reps N] [--only peers,header,...] [--out FILE] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import re
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import peers  # noqa: E402
from bench.timing import RunFailed, own_cpu, ratio, run_timed, stats, tree_cpu  # noqa: E402

RESULTS = ROOT / "bench" / "results.json"
DOC = ROOT / "docs" / "BENCHMARKS.md"
OUT_DIR = ROOT / "bench" / "out"
SECTIONS = ("peers", "reprovision", "latency", "header", "cold")
REQUIRED_KEYS = (
    "ansible_ratio_1",
    "ansible_ratio_8",
    "pyinfra_ratio_1",
    "pyinfra_ratio_8",
    "floor_ratio_1",
    "fanout_ratio_8",
    "reprovision_s",
    "ready_latency_s",
    "crash_latency_s",
    "header_ms",
    "cold_overhead_s",
)
# (key, target, "max" means the figure must be at most the target)
TARGETS = {
    "ansible_ratio_1": 0.1,
    "ansible_ratio_8": 0.1,
    "pyinfra_ratio_1": 1 / 3,
    "pyinfra_ratio_8": 1 / 3,
    "fanout_ratio_8": 1.5,
    "reprovision_s": 2.0,
    "ready_latency_s": 0.5,
    "crash_latency_s": 1.0,
    "header_ms": 50.0,
    "cold_overhead_s": 5.0,
}
BENCH_FIRST_OCTET = 100  # 127.0.0.100..: away from the test fixtures' 127.0.0.2..10


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- pure helpers (tested as tables) ---------------------------------------------------------------


def no_change(output: str) -> bool:
    """True when a run's recap (ours or Ansible's: `changed=N` per host) shows no change on any host."""
    counts = [int(n) for n in re.findall(r"\bchanged=(\d+)", output)]
    return bool(counts) and not any(counts)


def median_of(details: dict, tool: str, n: int) -> float | None:
    entry = details.get(tool, {}).get(str(n))
    return entry["median"] if entry else None


def summarize(timings: dict) -> dict:
    """The headline ratios from {tool: {hosts: stats}} (medians). None where a side is missing."""
    ours = lambda n: median_of(timings, "ours_cli", n)  # noqa: E731
    return {
        "ansible_ratio_1": ratio(ours(1), median_of(timings, "ansible", 1)),
        "ansible_ratio_8": ratio(ours(8), median_of(timings, "ansible", 8)),
        "pyinfra_ratio_1": ratio(ours(1), median_of(timings, "pyinfra", 1)),
        "pyinfra_ratio_8": ratio(ours(8), median_of(timings, "pyinfra", 8)),
        "floor_ratio_1": ratio(ours(1), median_of(timings, "fabric", 1)),
        "floor_ratio_8": ratio(ours(8), median_of(timings, "fabric", 8)),
        "fanout_ratio_8": ratio(ours(8), ours(1)),
        "fanout_ratio_16": ratio(ours(16), ours(1)),
        "fanout_ratio_8_in_process": ratio(median_of(timings, "ours_in_process", 8), median_of(timings, "ours_in_process", 1)),
        "fanout_ratio_16_in_process": ratio(median_of(timings, "ours_in_process", 16), median_of(timings, "ours_in_process", 1)),
    }


def verdict(key: str, value) -> str:
    if key not in TARGETS:
        return ""
    if value is None:
        return "not measured"
    return "met" if value <= TARGETS[key] + 1e-9 else "MISSED"


def host_time(results: list[dict]) -> float:
    """Seconds the host's worker spent inside modules: `_duration_s` of each result (and loop item)."""
    total = 0.0
    for r in results:
        items = r.get("results") if isinstance(r.get("results"), list) else [r]
        for item in items:
            if isinstance(item, dict):
                total += float(item.get("_duration_s") or 0.0)
    return total


def classify_cold_task(role: str | None, task: str) -> str:
    """Which part of a cold provision a task's time belongs to: install, generate, vllm or other."""
    role = (role or "").lower()
    name = task.lower()
    if role in ("venv", "flash-attn-pinning") or "install" in name and role != "vllm-service":
        return "install"
    if "generat" in name or "tiny" in role or "model" in role:
        return "generate"
    if role == "vllm-service":
        return "vllm"
    return "other"


# -- the run ---------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.quick = args.quick
        self.reps = args.reps or (3 if self.quick else 7)
        self.ansible_reps = args.reps or (1 if self.quick else 5)
        self.sizes = sorted({int(s) for s in args.hosts.split(",")})
        self.peer_sizes = [s for s in self.sizes if s <= 8]
        self.tools = [t for t in args.tools.split(",") if t]
        self.only = set(args.only.split(",")) if args.only else set(SECTIONS)
        self.tmp = Path(tempfile.mkdtemp(prefix="dfp-bench-"))
        os.chmod(self.tmp, 0o755)  # noqa: S103 - the ssh benchmark user must read the temp folder
        self.notes: dict[str, str] = {}
        self.details: dict = {}
        self.keys: dict = {k: None for k in REQUIRED_KEYS}
        self.pool = None
        self.home = ""

    # -- hosts -------------------------------------------------------------------------------------
    def start_pool(self) -> None:
        from tests import sshd_harness

        reason = sshd_harness.available()
        if reason:
            raise RuntimeError(f"cannot start the sshd hosts: {reason}")
        count = max(self.sizes)
        log(f"starting {count} sshd hosts on 127.0.0.{self.args.first_octet}..{self.args.first_octet + count - 1}")
        self.pool = sshd_harness.SshdPool(count=count, first_octet=self.args.first_octet).start()
        self.home = pwd.getpwnam(self.pool.hosts[0].user).pw_dir

    def stop_pool(self) -> None:
        if self.pool is not None:
            self.pool.stop()
            self.pool = None
        if self.home:
            shutil.rmtree(Path(self.home) / "dfp-bench", ignore_errors=True)

    def hosts(self, n: int) -> list:
        return self.pool.hosts[:n]

    def our_inventory(self, n: int) -> Path:
        from tests.sshd_harness import write_inventory

        path = self.tmp / f"ours-{n}.yaml"
        if not path.exists():
            write_inventory(path, self.hosts(n))
        return path

    # -- 1 and 2: the workload on every tool ---------------------------------------------------------
    def ours_cli(self, n: int) -> tuple:
        argv = peers.ours_argv(self.our_inventory(n), self.home, "ours", n)
        return run_timed(argv, cwd=str(ROOT))

    def ours_in_process(self, n: int) -> tuple:
        from engine.api import run_playbook

        started = time.perf_counter()
        res = run_playbook(
            ROOT / "bench" / "workload" / "ours.yaml",
            self.our_inventory(n),
            extra_vars={"base": peers.workload_base(self.home, "ours")},
            forks=max(8, n),
        )
        wall = time.perf_counter() - started
        if res.exit_code != 0:
            raise RunFailed(f"run_playbook exited {res.exit_code}: {res.error or res.tasks[-1:]}")
        changed = sum(c["changed"] for c in res.recap.values())
        return wall, f"changed={changed}"

    def section_peers(self) -> None:
        runners: dict = {}
        versions: dict = {}
        if "ours" in self.tools:
            for n in self.sizes:
                runners[("ours_cli", n)] = lambda n=n: self.ours_cli(n)
                runners[("ours_in_process", n)] = lambda n=n: self.ours_in_process(n)
        if "fabric" in self.tools:
            for n in self.peer_sizes:
                hf = peers.fabric_hosts_file(self.tmp / f"fabric-{n}.json", self.hosts(n))
                runners[("fabric", n)] = lambda hf=hf: peers.fabric_run(hf, self.home)
            import fabric
            import paramiko

            versions["fabric"] = f"fabric {fabric.__version__}, paramiko {paramiko.__version__}"
        control_dir = self.tmp / "ansible-cp"
        control_dir.mkdir(exist_ok=True)
        for tool in ("ansible", "pyinfra"):
            if tool not in self.tools:
                continue
            try:
                exe = peers.ensure_venv(tool, log=log)
                versions[tool] = peers.peer_version(exe)
            except peers.PeerUnavailable as exc:
                self.notes[f"{tool}"] = f"{tool} could not be installed: {exc}"
                continue
            for n in self.peer_sizes:
                if tool == "ansible":
                    inv = peers.ansible_inventory(self.tmp / f"ansible-{n}.yaml", self.hosts(n))
                    runners[(tool, n)] = lambda exe=exe, inv=inv: peers.ansible_run(exe, inv, self.home, control_dir)
                else:
                    inv = peers.pyinfra_inventory(self.tmp / f"pyinfra-{n}.py", self.hosts(n))
                    runners[(tool, n)] = lambda exe=exe, inv=inv: peers.pyinfra_run(exe, inv, self.home)
        self.details["versions"] = versions
        try:
            self._time_interleaved(runners)
        finally:
            peers.close_ansible_masters(control_dir)

    def _time_interleaved(self, runners: dict) -> None:
        broken: dict = {}
        # The end state every tool's workload makes (same folders, contents and modes), set up by the
        # floor's script in each peer's folder: so even a first run of a peer is a no-change run.
        peer_sizes = [n for t, n in runners if t in ("ansible", "pyinfra")]
        if peer_sizes:
            seed = peers.fabric_hosts_file(self.tmp / "seed.json", self.hosts(max(peer_sizes)))
            for tool in ("ansible", "pyinfra"):
                peers.fabric_run(seed, self.home, tool)
        # Warm-up: each tool once on its largest host set (ours also places its runtime on the hosts).
        # --quick skips Ansible's (20-30 s on 8 hosts): its timed run is then a first, colder one.
        for tool in sorted({t for t, _ in runners}):
            if tool == "ansible" and self.quick:
                continue
            biggest = max(n for t, n in runners if t == tool)
            log(f"warm-up: {tool} on {biggest} host(s)")
            try:
                runners[(tool, biggest)]()
            except Exception as exc:
                broken[tool] = f"{tool} failed in warm-up: {exc}"
        samples: dict = {key: [] for key in runners if key[0] not in broken}
        cpu: dict = {key: [] for key in samples}
        listeners = [h.pid for h in self.pool.hosts]
        for rep in range(max(self.reps, self.ansible_reps)):
            log(f"repetition {rep + 1}/{max(self.reps, self.ansible_reps)}")
            for key, fn in runners.items():
                tool, n = key
                if tool in broken:
                    continue
                if rep >= (self.ansible_reps if tool == "ansible" else self.reps):
                    continue
                try:
                    host0, ctl0 = tree_cpu(listeners), own_cpu(True) + own_cpu(False)
                    wall, out = fn()
                    ctl = own_cpu(True) + own_cpu(False) - ctl0
                    time.sleep(0.05)  # let the sshd listeners reap the sessions that just ended
                    cpu[key].append((ctl, tree_cpu(listeners) - host0))
                except Exception as exc:
                    broken[tool] = f"{tool} failed on {n} host(s): {exc}"
                    continue
                if tool in ("ours_cli", "ours_in_process", "ansible") and not no_change(out):
                    self.notes[f"{tool}_idempotent"] = f"{tool} reported changes in a timed run on {n} host(s)"
                samples[key].append(wall)
        for tool, why in broken.items():
            self.notes[tool] = why
        timings: dict = {}
        for (tool, n), s in samples.items():
            if tool not in broken and s:
                timings.setdefault(tool, {})[str(n)] = stats(s)
        self.details["workload"] = timings
        # CPU seconds per run (medians): the tool's own processes, and the hosts' side (the sshd sessions
        # and everything under them). All hosts share this machine's cores, so CPU bounds the fan-out.
        self.details["workload_cpu"] = {
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
        self.keys.update({k: v for k, v in summarize(timings).items()})
        for key in (
            "ansible_ratio_1",
            "ansible_ratio_8",
            "pyinfra_ratio_1",
            "pyinfra_ratio_8",
            "floor_ratio_1",
            "fanout_ratio_8",
        ):
            if self.keys.get(key) is None and key not in self.notes:
                self.notes[key] = "a side of this ratio did not run (see the other notes)"

    # -- 3: idempotent re-provision ------------------------------------------------------------------
    def section_reprovision(self) -> None:
        from bench import provision

        value, detail, why = provision.reprovision(reps=self.reps, log=log)
        self.keys["reprovision_s"] = value
        self.details["reprovision"] = detail
        if why:
            self.notes["reprovision_s"] = why

    # -- 4: readiness and crash latency --------------------------------------------------------------
    def section_latency(self) -> None:
        from bench import latency

        out = latency.run_section(reps=1 if self.quick else 3, log=log)
        self.details["latency"] = out
        self.keys["ready_latency_s"] = out.get("ready_latency_s")
        self.keys["crash_latency_s"] = out.get("crash_latency_s")
        for key in ("ready_latency_s", "crash_latency_s"):
            if out.get(key) is None:
                self.notes[key] = out.get("why", "not measured")

    # -- 5: header-only drafter inspection -----------------------------------------------------------
    def section_header(self) -> None:
        from bench import header
        from tests.sshd_harness import write_inventory

        local_inv = write_inventory(self.tmp / "local.yaml", [], local=True)
        hosts = {"local": "local"}
        if self.pool is not None:
            hosts["ssh"] = self.pool.hosts[0].name
        out = header.run_section(
            lambda name: local_inv if name == "local" else self.our_inventory(1), hosts, reps=self.reps, log=log
        )
        self.details["header"] = out
        self.keys["header_ms"] = out["in_process"]["ms_median"]

    # -- 6: cold local provision ----------------------------------------------------------------------
    def section_cold(self) -> None:
        from bench import provision

        def reprovision_there(extra_vars: dict) -> None:
            # The machine's own `local` server was not up: measure the re-provision on the benchmark's root.
            if self.keys["reprovision_s"] is not None or "reprovision" not in self.only:
                return
            how = f"the benchmark's cold-provisioned root {extra_vars['dfp_root']} (port {extra_vars['vllm_port']})"
            value, detail, why = provision.reprovision(reps=self.reps, log=log, extra_vars=extra_vars, how=how)
            self.keys["reprovision_s"] = value
            self.details["reprovision"] = dict(detail, server=how)
            self.notes.pop("reprovision_s", None)
            if why:
                self.notes["reprovision_s"] = why

        extra = dict(kv.split("=", 1) for kv in self.args.cold_extra)
        value, detail, why = provision.cold(log=log, while_up=reprovision_there, extra_vars=extra)
        self.keys["cold_overhead_s"] = value
        self.details["cold"] = detail
        if why:
            self.notes["cold_overhead_s"] = why

    # -- driver ----------------------------------------------------------------------------------------
    def run(self) -> dict:
        started = time.time()
        if self.quick and "cold" in self.only:
            self.only.discard("cold")
            self.notes["cold_overhead_s"] = "--quick skips the cold local provision (it builds the vLLM environment)"
        if self.quick:
            self.notes["quick"] = (
                f"--quick: {self.reps} repetitions ({self.ansible_reps} for Ansible, without a warm-up run) instead of "
                "7 (5), and no cold provision"
            )
        needs_pool = self.only & {"peers", "header"}
        try:
            if needs_pool:
                self.start_pool()
            for name in SECTIONS:
                if name not in self.only:
                    continue
                log(f"section: {name}")
                t0 = time.perf_counter()
                try:
                    getattr(self, f"section_{name}")()
                except Exception as exc:
                    self.notes[name] = f"{name} failed: {type(exc).__name__}: {exc}"
                    log(traceback.format_exc())
                self.details.setdefault("section_s", {})[name] = round(time.perf_counter() - t0, 2)
        finally:
            self.stop_pool()
            shutil.rmtree(self.tmp, ignore_errors=True)
        for key in REQUIRED_KEYS:
            if self.keys.get(key) is None and key not in self.notes:
                section = {
                    "header_ms": "header",
                    "reprovision_s": "reprovision",
                    "cold_overhead_s": "cold",
                    "ready_latency_s": "latency",
                    "crash_latency_s": "latency",
                }.get(key, "peers")
                self.notes[key] = self.notes.get(section, f"section '{section}' was not run (--only)")
        return {
            **self.keys,
            "notes": self.notes,
            "targets": {k: round(v, 4) for k, v in TARGETS.items()},
            "verdicts": {k: verdict(k, self.keys.get(k)) for k in TARGETS},
            "mode": "quick" if self.quick else "full",
            "command": self.args.command_line,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "duration_s": round(time.time() - started, 1),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "platform": platform.platform(),
                "load_avg_at_end": [round(x, 2) for x in os.getloadavg()],
            },
            "hosts": self.sizes,
            "repetitions": {"default": self.reps, "ansible": self.ansible_reps},
            "details": self.details,
        }


# -- docs ------------------------------------------------------------------------------------------


def _fmt(v, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.3f}{unit}" if abs(v) < 10 else f"{v:.1f}{unit}"
    return f"{v}{unit}"


def render_block(res: dict) -> str:
    """The markdown results block for one run: the headline table and the raw timings."""
    lines = [
        f"Made by `{res['command']}` on {res['date']} ({res['mode']} run, {res['duration_s']} s; "
        f"{res['machine']['cpus']} CPUs, Python {res['machine']['python']}, load at end "
        f"{res['machine']['load_avg_at_end']}).",
        "",
    ]
    lines += ["| figure | value | target | verdict |", "|---|---|---|---|"]
    labels = {
        "ansible_ratio_1": "ours / Ansible, 1 host (medians)",
        "ansible_ratio_8": "ours / Ansible, 8 hosts",
        "pyinfra_ratio_1": "ours / pyinfra, 1 host",
        "pyinfra_ratio_8": "ours / pyinfra, 8 hosts",
        "floor_ratio_1": "ours / raw Fabric, 1 host",
        "floor_ratio_8": "ours / raw Fabric, 8 hosts",
        "fanout_ratio_8": "fan-out: ours 8 hosts / 1 host",
        "fanout_ratio_16": "fan-out: ours 16 hosts / 1 host",
        "reprovision_s": "idempotent re-provision of `local` (s)",
        "ready_latency_s": "readiness latency (s)",
        "crash_latency_s": "crash detection latency (s)",
        "header_ms": "header-only drafter inspection, local (ms)",
        "cold_overhead_s": "cold provision overhead beyond install + vLLM (s)",
    }
    for key, label in labels.items():
        target = TARGETS.get(key)
        lines.append(
            f"| {label} | {_fmt(res.get(key))} | {'<= ' + _fmt(round(target, 3)) if target else ''} | "
            f"{verdict(key, res.get(key))} |"
        )
    wl = res.get("details", {}).get("workload", {})
    names = {
        "ours_cli": "ours (`invoke play`, whole process)",
        "ours_in_process": "ours (run_playbook in-process)",
        "fabric": "raw Fabric (floor)",
        "pyinfra": "pyinfra",
        "ansible": "ansible-playbook",
    }
    if wl:
        sizes = sorted({int(n) for t in wl.values() for n in t})
        lines += ["", "Wall time of the 11-task no-change run, min / median seconds:", ""]
        lines.append("| tool | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in sizes) + " |")
        lines.append("|---|" + "---|" * len(sizes))
        for tool, label in names.items():
            if tool in wl:
                cells = [
                    f"{wl[tool][str(n)]['min']:.3f} / {wl[tool][str(n)]['median']:.3f}" if str(n) in wl[tool] else ""
                    for n in sizes
                ]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    wcpu = res.get("details", {}).get("workload_cpu", {})
    if wcpu:
        sizes = sorted({int(n) for t in wcpu.values() for n in t})
        lines += [
            "",
            "CPU per run, median milliseconds: the tool's own processes + the hosts' side (sshd sessions and "
            "all below them; every host shares this machine's cores):",
            "",
        ]
        lines.append("| tool | " + " | ".join(f"{n} host{'s' if n > 1 else ''}" for n in sizes) + " |")
        lines.append("|---|" + "---|" * len(sizes))
        for tool, label in names.items():
            if tool in wcpu:
                cells = [
                    f"{wcpu[tool][str(n)]['control_cpu_s'] * 1000:.0f} + {wcpu[tool][str(n)]['host_cpu_s'] * 1000:.0f}"
                    if str(n) in wcpu[tool]
                    else ""
                    for n in sizes
                ]
                lines.append(f"| {label} | " + " | ".join(cells) + " |")
    header = res.get("details", {}).get("header")
    if header:
        d = header["drafter"]
        lines += [
            "",
            f"Header inspection: drafter declares {d['declared_bytes'] / 1e9:.2f} GB (fc.weight {d['fc_shape']} "
            f"BF16), header {d['header_bytes']} bytes, {d['allocated_bytes']} bytes allocated on disk.",
            "",
        ]
        lines += ["| where | time | bytes read |", "|---|---|---|"]
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
    rp = res.get("details", {}).get("reprovision", {})
    if rp.get("cli"):
        lines += [
            "",
            f"Re-provision ({rp['server']}): {rp['cli']['median']:.2f} s median of {rp['cli']['n']} CLI runs, changed "
            f"{max(rp['changed_per_run'])}, {rp['tasks']} tasks; module time on the host {rp['host_module_s']:.2f} s, so "
            f"{rp['our_share_of_cli_wall']:.0%} of the CLI's wall is our own code (start-up included) and "
            f"{rp['our_share_of_in_process_wall']:.0%} of an in-process run's ({rp['in_process_wall_s']:.2f} s).",
        ]
    cold = res.get("details", {}).get("cold", {})
    if cold.get("total_s") is not None and cold.get("vllm_own_s") is not None:
        p = cold["parts"]
        lines += [
            "",
            f"Cold provision: {cold['total_s']:.1f} s = install {p['install']:.1f} + generate {p['generate']:.1f} + "
            f"vLLM role {p['vllm']:.1f} (module: ready in {cold.get('vllm_role_ready_s')} s) + other {p['other']:.2f}; "
            f"`vllm serve` by hand {cold['vllm_own_s']:.1f} s to /health 200 with empty caches "
            f"({cold['vllm_own_warm_cache_s']:.1f} s with the run's); beyond the module's own launch-to-ready: "
            f"{cold.get('overhead_vs_role_ready_s')} s.",
        ]
    if res.get("notes"):
        lines += ["", "Notes:", ""]
        lines += [f"- `{k}`: {v}" for k, v in sorted(res["notes"].items())]
    return "\n".join(lines)


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="under 2 minutes: fewer repetitions, no cold provision")
    ap.add_argument("--reps", type=int, default=0, help="repetitions per measurement (default 7, quick 3; Ansible 5/1)")
    ap.add_argument("--hosts", default="1,8,16", help="host counts (ours runs all; peers those <= 8)")
    ap.add_argument("--tools", default="ours,fabric,pyinfra,ansible", help="which tools of the workload to run")
    ap.add_argument("--only", default="", help=f"comma-separated sections of {','.join(SECTIONS)}")
    ap.add_argument("--out", default=str(RESULTS), help="results file (default bench/results.json)")
    ap.add_argument("--no-docs", action="store_true", help="do not update docs/BENCHMARKS.md")
    ap.add_argument(
        "--cold-extra",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra variable for the cold provision (repeatable), e.g. num_speculative_tokens=3",
    )
    ap.add_argument("--first-octet", type=int, default=BENCH_FIRST_OCTET, help="sshd hosts on 127.0.0.N.. (default 100)")
    args = ap.parse_args(argv)
    shown = sys.argv[1:] if argv is None else argv
    args.command_line = (
        "invoke bench" + (" --quick" if args.quick else "")
        if set(shown) <= {"--quick"}
        else "python bench/run.py " + " ".join(shown)
    )
    res = Bench(args).run()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, sort_keys=False) + "\n")
    if out.resolve() == RESULTS.resolve():
        OUT_DIR.mkdir(exist_ok=True)
        shutil.copyfile(out, OUT_DIR / f"results-{res['mode']}.json")
    if not args.no_docs:
        update_doc(res)
    log(f"wrote {out}" + ("" if args.no_docs else f" and {DOC}"))
    for key in REQUIRED_KEYS:
        log(f"  {key:18} {_fmt(res[key]):>10}  {verdict(key, res[key])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
