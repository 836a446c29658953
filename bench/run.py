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
  6. cold local provision vs `vllm serve` alone (full run only);
  7. fleet: ours on 50 and 100 hosts (wall, control-node CPU, hosts' CPU), --forks 1/8/32/100, and the
     peers on 50/100 hosts (full run only) (bench/fleet.py); scale: the control node's CPU and peak memory
     per host on 1,000 hosts (full run only, bench/scale.py).
A part that cannot run is null in results.json with the reason under "notes".

Usage: python bench/run.py [--quick] [--reps N] [--only peers,header,...] [--out FILE] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import side_by_side  # noqa: E402
from bench.figures import REQUIRED_KEYS, SECTION_OF, TARGETS, verdict  # noqa: E402
from bench.render import DOC, fmt, update_doc  # noqa: E402
from bench.timing import compile_tree, log, stop_daemons  # noqa: E402

RESULTS = ROOT / "bench" / "results.json"
OUT_DIR = ROOT / "bench" / "out"
# Each run its own connection: the tool keeps them 60 s by default (ControlPersist, as Ansible's ssh_args).
DIRECT_VARS = {"ansible_ssh_common_args": "-o ControlPersist=no"}
SECTIONS = ("peers", "parity", "targets", "fleet", "scale", "reprovision", "latency", "header", "models", "cold")
BENCH_FIRST_OCTET = 100  # 127.0.0.100..: away from the test fixtures' 127.0.0.2..10


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
        self.broken_peers: dict[str, str] = {}  # tool -> why, from the peers section (the fleet skips them)

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
            stop_daemons()
        if self.home:
            shutil.rmtree(Path(self.home) / "dfp-bench", ignore_errors=True)

    def hosts(self, n: int) -> list:
        return self.pool.hosts[:n]

    def our_inventory(self, n: int, direct: bool = False) -> Path:
        """The workload's inventory of n hosts: as a user writes it (connections kept 60 s, the tool's default),
        or with direct: each run its own connection (ControlPersist=no)."""
        from tests.sshd_harness import write_inventory

        path = self.tmp / f"ours-{n}{'-direct' if direct else ''}.yaml"
        if not path.exists():
            write_inventory(path, self.hosts(n), vars=DIRECT_VARS if direct else None)
        return path

    # -- 1 and 2: the workload on every tool (bench/side_by_side.py) -------------------------------------
    def section_peers(self) -> None:
        side_by_side.section_peers(self)

    # -- 2b: the differential corpus's Ansible playbooks, no change, ours and ansible-playbook (bench/parity.py) ----
    def section_parity(self) -> None:
        from bench import parity

        parity.section_parity(self)

    # -- 2c: ansible-core's own integration targets, ours and ansible-playbook (bench/targets.py) ----------
    def section_targets(self) -> None:
        from bench import targets

        targets.section_targets(self)

    # -- 7: 50 and 100 hosts, --forks (bench/fleet.py) ------------------------------------------------------
    def section_fleet(self) -> None:
        from bench import fleet

        if not self.home:  # --only fleet: the peers' pool did not run
            from tests.sshd_harness import ensure_user

            self.home = ensure_user().pw_dir
        fleet.section_fleet(self)

    # -- 7b: the control node's CPU and memory per host on 1,000 hosts (bench/scale.py) ----------------------
    def section_scale(self) -> None:
        from bench import scale

        scale.section_scale(self)

    # -- 3: idempotent re-provision ------------------------------------------------------------------
    def section_reprovision(self) -> None:
        from bench import provision

        self._record("reprovision_s", "reprovision", *provision.reprovision(reps=self.reps, log=log))

    def _record(self, key: str, detail_name: str, value, detail: dict, why: str | None) -> None:
        """Keep a section's (figure, details, reason when it is missing or suspect) in the results."""
        self.keys[key] = value
        self.details[detail_name] = detail
        if why:
            self.notes[key] = why

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

    # -- models: a repository onto 8 hosts, direct and through the control node (bench/models.py) ------------
    def section_models(self) -> None:
        from bench import models

        models.section_models(self)

    # -- 6: cold local provision ----------------------------------------------------------------------
    def section_cold(self) -> None:
        from bench import provision

        extra = dict(kv.split("=", 1) for kv in self.args.cold_extra)
        result = provision.cold(log=log, while_up=self._reprovision_cold_root, extra_vars=extra)
        self._record("cold_overhead_s", "cold", *result)

    def _reprovision_cold_root(self, extra_vars: dict) -> None:
        """While the cold-provisioned server is up: how far apart two identical speed verdicts are, and, when
        the machine's own `local` server was not up, the re-provision on the benchmark's root instead."""
        from bench import provision, speed

        self._record("speed_repeat_apart", "speed_repeat", *speed.repeatability(extra_vars, self.tmp / "speed" / "repeat.json", log))

        if self.keys["reprovision_s"] is not None or "reprovision" not in self.only:
            return
        how = f"the benchmark's cold-provisioned root {extra_vars['dfp_root']} (port {extra_vars['vllm_port']})"
        value, detail, why = provision.reprovision(reps=self.reps, log=log, extra_vars=extra_vars, how=how)
        self.notes.pop("reprovision_s", None)
        self._record("reprovision_s", "reprovision", value, dict(detail, server=how), why)

    # -- driver ----------------------------------------------------------------------------------------
    def run(self) -> dict:
        started = time.time()
        self._note_quick()
        compile_tree(ROOT)  # like the peers' installed packages (bench/timing.py compile_tree says why)
        try:
            if self.only & {"peers", "parity", "header", "models"}:
                self.start_pool()
            for name in SECTIONS:
                if name in self.only:
                    self._run_section(name)
        finally:
            self.stop_pool()
            shutil.rmtree(self.tmp, ignore_errors=True)
        self._explain_missing()
        return self._results(started)

    def _note_quick(self) -> None:
        if self.quick and "cold" in self.only:
            self.only.discard("cold")
            self.notes["cold_overhead_s"] = "--quick skips the cold local provision (it builds the vLLM environment)"
        if self.quick:
            self.notes["quick"] = (
                f"--quick: {self.reps} repetitions ({self.ansible_reps} for Ansible, without a warm-up run) instead of "
                "7 (5), and no cold provision"
            )

    def _run_section(self, name: str) -> None:
        """One section, timed; its failure becomes a note so that the other sections still run."""
        log(f"section: {name}")
        t0 = time.perf_counter()
        try:
            getattr(self, f"section_{name}")()
        except Exception as exc:
            self.notes[name] = f"{name} failed: {type(exc).__name__}: {exc}"
            log(traceback.format_exc())
        self.details.setdefault("section_s", {})[name] = round(time.perf_counter() - t0, 2)

    def _explain_missing(self) -> None:
        """Every required figure that is null gets a reason: its section's failure, or that it did not run."""
        for key in REQUIRED_KEYS:
            if self.keys.get(key) is None and key not in self.notes:
                section = SECTION_OF.get(key, "peers")
                self.notes[key] = self.notes.get(section, f"section '{section}' was not run (--only)")

    def _results(self, started: float) -> dict:
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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The options, plus `command_line`: how results.json and the docs say the run was made."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="under 2 minutes: fewer repetitions, no cold provision")
    ap.add_argument("--reps", type=int, default=0, help="repetitions per measurement (default 7, quick 3; Ansible 5/1)")
    ap.add_argument("--hosts", default="1,8,16", help="host counts (ours runs all; peers those <= 8)")
    ap.add_argument("--tools", default="ours,fabric,pyinfra,ansible,mitogen,ansible_rs",
                    help="which tools of the workload to run (ours, fabric, pyinfra, ansible, mitogen, ansible_rs)")
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
    return args


FABRIC_SECTIONS = ("peers", "fleet")  # the raw-Fabric floor, which also sets up the peers' folders (bench/peers.py)


def missing_packages(args: argparse.Namespace) -> str | None:
    """Why the run cannot start here, or None: Fabric is a benchmark package (requirements-test.txt), not the
    tool's (its runtime is paramiko: docs/ARCHITECTURE.md), so an environment of requirements.txt alone lacks it."""
    wanted = set(args.only.split(",")) if args.only else set(SECTIONS)
    if not wanted & set(FABRIC_SECTIONS):
        return None
    try:
        import fabric  # noqa: F401 - only whether it imports
    except ImportError as exc:
        return (f"the sections {', '.join(s for s in FABRIC_SECTIONS if s in wanted)} need Fabric (the raw-Fabric floor), "
                f"which does not import here ({exc}): pip install -r requirements.txt -r requirements-test.txt "
                "-c constraints.txt")
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_packages(args)
    if missing:
        log(f"cannot run: {missing}")
        return 2
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
        log(f"  {key:18} {fmt(res[key]):>10}  {verdict(key, res[key])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
