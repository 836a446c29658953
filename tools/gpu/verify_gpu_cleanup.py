#!/usr/bin/env python3
"""GPU truth for gpu-cleanup: library/gpu_cleanup.py by hand against the real nvidia-smi and real
CUDA memory held by torch processes (a tree with a SIGTERM-ignoring parent, a grandchild and a
double-forked child out of the group; a foreign holder; an orphan left by SIGKILL to the top; a
holder owned by another user).

Run from the repository root on the GPU machine (python3 with torch + CUDA, and psutil):

    python3 tools/gpu/verify_gpu_cleanup.py [--gib 2] [--out DIR]

tenacity (pure Python, used by the module) is not preinstalled there: put it on PYTHONPATH, e.g.
carry a folder holding the `tenacity` package and run with PYTHONPATH=that/folder. The script checks
this first and says so. Writes DIR/gpu_cleanup.json (DIR: --out, else $OUT, else ./gpu-verify-out)
and DIR/gpu_cleanup.log; exit 0 when every expectation held, 1 otherwise, 3 when it could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
MODULE = "library.gpu_cleanup"  # run by hand: python3 -m MODULE, from ROOT
FACTS = "library.facts"
OTHER_USER = "dfp-gpu-other"
THRESHOLD = 1024
LOG: list = []
MADE_USER = False
SIMULATE = False  # --simulate: rehearse on a machine without GPU (stand-in nvidia-smi, no torch)


def log(msg: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    LOG.append(line)
    print(line, flush=True)


def missing_dependencies() -> list:
    out = []
    for name in ("psutil", "tenacity") + (() if SIMULATE else ("torch",)):
        try:
            __import__(name)
        except ImportError as exc:
            out.append(f"{name}: {exc}")
    return out


def smi(*args: str) -> str:
    proc = subprocess.run(["nvidia-smi", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    return proc.stdout.decode("utf-8", "replace")


def used_mib() -> int:
    return int(smi("--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0").strip())


def snapshot(tree_pids: dict) -> dict:
    """What nvidia-smi and the /proc fd scan see now, with our tree's names beside the PIDs."""
    from dflash_host.host.gpus import parse_compute_apps, scan_device_fds

    names = {pid: name for name, pid in tree_pids.items()}
    apps = smi("--query-compute-apps=pid,process_name,used_memory,gpu_uuid", "--format=csv,noheader,nounits")
    fds, denied = scan_device_fds()
    return {
        "memory_used_mib": used_mib(),
        "compute_apps_raw": apps.strip().splitlines(),
        "compute_apps_named": [dict(a, name=names.get(a["pid"], "(not in this tree)")) for a in parse_compute_apps(apps)],
        "fd_scan": {str(pid): {"name": names.get(pid, "(other)"), "devices": devs} for pid, devs in sorted(fds.items())},
        "fd_scan_unreadable": denied,
    }


def tree_table(tree) -> list:
    rows = []
    for name, proc in tree.procs.items():
        try:
            rows.append(
                {
                    "name": name,
                    "pid": proc.pid,
                    "ppid": proc.ppid(),
                    "pgid": os.getpgid(proc.pid),
                    "sid": os.getsid(proc.pid),
                    "user": proc.username(),
                }
            )
        except Exception as exc:  # gone meanwhile
            rows.append({"name": name, "pid": proc.pid, "error": str(exc)})
    return rows


class FreePoller:
    """Polls nvidia-smi every 0.1 s from start(); records when memory.used first dropped below THRESHOLD."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.free_after_s = None
        self.samples: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FreePoller:
        self.t0 = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                used = used_mib()
            except ValueError:
                used = None
            t = round(time.monotonic() - self.t0, 2)
            if not self.samples or self.samples[-1][1] != used:
                self.samples.append((t, used))
            if used is not None and used < THRESHOLD and self.free_after_s is None:
                self.free_after_s = t
            self._stop.wait(0.1)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(5)
        return {"free_after_s": self.free_after_s, "changes": self.samples}


def run_module(args: dict, work: Path, check: bool = False) -> dict:
    path = work / f"args-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(args))
    argv = [sys.executable, "-m", MODULE, str(path)] + (["--check"] if check else [])
    poller = FreePoller().start()
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=300, check=False)
    wall = round(time.monotonic() - t0, 3)
    polled = poller.stop()
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = {"failed": True, "msg": "module printed no JSON", "stdout": proc.stdout.decode()[-2000:]}
    result["_wall_s"] = wall
    result["_poll"] = polled
    if proc.stderr:
        result["_stderr"] = proc.stderr.decode()[-2000:]
    log(
        f"  module{' --check' if check else ''}: rc={proc.returncode} changed={result.get('changed')} "
        f"failed={result.get('failed')} wall={wall}s poll_free_after={polled['free_after_s']}s :: {result.get('msg')}"
    )
    return result


def gone(proc) -> bool:
    import psutil

    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def expect(phase: dict, what: str, ok: bool) -> None:
    phase.setdefault("expectations", []).append({"what": what, "ok": bool(ok)})
    log(f"  {'PASS' if ok else 'FAIL'}: {what}")


def base_args(pidfile: Path, **extra) -> dict:
    args = {"pidfile": str(pidfile), "threshold_mib": THRESHOLD, "grace_s": 3, "timeout_s": 60}
    args.update(extra)
    return args


def simulated(node: dict) -> dict:
    """The same tree for the stand-in: registered MiB (allocation + ~500 MiB context) instead of torch."""
    out = {k: v for k, v in node.items() if k != "cuda_gib"}
    if node.get("cuda_gib"):
        out["mib"] = int(float(node["cuda_gib"]) * 1024) + 500
    out["children"] = [simulated(c) for c in node.get("children", [])]
    return out


def start(gpu, node: dict, **kw):
    t0 = time.monotonic()
    if SIMULATE:
        node = simulated(node)
    # The torch python must be usable by the other user too (on the GPU machine it is, under /opt).
    python = "/usr/bin/python3" if SIMULATE and kw.get("user") else sys.executable
    tree = gpu.start(node, python=python, timeout=240, **kw)
    time.sleep(1.0)  # let every allocation show in nvidia-smi
    log(f"  started {sorted(tree.pids)} in {time.monotonic() - t0:.1f} s: {tree.pids}")
    return tree


# ---------------------------------------------------------------- phases


def phase_managed_tree(gpu, work: Path, gib: float) -> dict:
    """The managed tree: TERM-ignoring top, worker + grandchild in the group, a detached child."""
    from dflash_host.host.processes import write_pidfile

    ph: dict = {"name": "managed_tree"}
    node = {
        "name": "top",
        "ignore_term": True,
        "cuda_gib": gib / 2,
        "children": [
            {"name": "worker", "cuda_gib": gib, "children": [{"name": "grandchild", "cuda_gib": gib / 2}]},
            {"name": "detached", "cuda_gib": gib / 2, "detach": True},
        ],
    }
    tree = start(gpu, node)
    pidfile = work / "run" / "vllm.pid"
    ph["pidfile"] = write_pidfile(str(pidfile), tree.procs["top"])
    gpu.release()
    time.sleep(0.3)
    ph["processes"] = tree_table(tree)
    ph["seen_before"] = snapshot(tree.pids)
    log(f"  before: {ph['seen_before']['memory_used_mib']} MiB; compute-apps {ph['seen_before']['compute_apps_raw']}")
    ph["check_mode"] = run_module(base_args(pidfile), work, check=True)
    expect(
        ph,
        "check mode lists the whole tree and kills nothing",
        set(ph["check_mode"].get("would_stop", [])) >= set(tree.pids.values()) and not any(gone(p) for p in tree.procs.values()),
    )
    ph["run"] = run_module(base_args(pidfile), work)
    expect(ph, "run succeeds and reports changed", ph["run"].get("changed") and not ph["run"].get("failed"))
    expect(ph, "every process of the tree is gone", all(gone(p) for p in tree.procs.values()))
    ph["seen_after"] = snapshot(tree.pids)
    expect(ph, f"memory.used below {THRESHOLD} MiB afterwards", ph["seen_after"]["memory_used_mib"] < THRESHOLD)
    ph["second_run"] = run_module(base_args(pidfile), work)
    expect(ph, "second run: ok, changed=False", not ph["second_run"].get("changed") and not ph["second_run"].get("failed"))
    gpu.stop_all()
    return ph


def phase_foreign(gpu, work: Path, gib: float) -> dict:
    from dflash_host.host.processes import write_pidfile

    ph: dict = {"name": "foreign_holder"}
    tree = start(gpu, {"name": "api", "cuda_gib": gib / 2, "children": [{"name": "engine", "cuda_gib": gib}]})
    foreign = start(gpu, {"name": "foreign", "cuda_gib": gib})
    pidfile = work / "run" / "vllm-foreign.pid"
    write_pidfile(str(pidfile), tree.procs["api"])
    fpid = foreign.pids["foreign"]
    ph["foreign_pid"] = fpid
    ph["seen_before"] = snapshot({**tree.pids, **foreign.pids})
    ph["run"] = run_module(base_args(pidfile), work)
    expect(ph, "fails while the foreign holder keeps the GPU busy", ph["run"].get("failed"))
    expect(ph, "the failure lists the foreign holder's PID", f"pid {fpid} " in (ph["run"].get("msg") or ""))
    expect(ph, "the foreign holder survives", not gone(foreign.procs["foreign"]))
    expect(ph, "the managed tree is gone all the same", all(gone(p) for p in tree.procs.values()))
    ph["seen_between"] = snapshot({**tree.pids, **foreign.pids})
    ph["named_run"] = run_module(base_args(pidfile, kill_foreign=[fpid]), work)
    expect(ph, "named in kill_foreign: stopped, GPU free", not ph["named_run"].get("failed") and gone(foreign.procs["foreign"]))
    ph["seen_after"] = snapshot({})
    gpu.stop_all()
    return ph


def phase_orphan(gpu, work: Path, gib: float) -> dict:
    """SIGKILL to the top alone leaves the engine holding the GPU; the pidfile's tree still proves it."""
    from dflash_host.host.processes import write_pidfile

    ph: dict = {"name": "orphan_after_sigkill_to_top"}
    tree = start(gpu, {"name": "api", "cuda_gib": gib / 4, "children": [{"name": "engine", "cuda_gib": gib}]})
    pidfile = work / "run" / "vllm-orphan.pid"
    write_pidfile(str(pidfile), tree.procs["api"])
    os.kill(tree.pids["api"], signal.SIGKILL)
    tree.popen.wait(10)
    time.sleep(2)
    ph["processes"] = tree_table(tree)
    ph["seen_before"] = snapshot(tree.pids)
    expect(ph, "the orphaned engine still holds GPU memory", ph["seen_before"]["memory_used_mib"] >= THRESHOLD)
    ph["run"] = run_module(base_args(pidfile), work)
    expect(
        ph,
        "run stops the orphan and the GPU is free",
        not ph["run"].get("failed") and gone(tree.procs["engine"]) and used_mib() < THRESHOLD,
    )
    gpu.stop_all()
    return ph


def phase_other_user(gpu, work: Path, gib: float) -> dict:
    ph: dict = {"name": "other_users_holder"}
    if os.geteuid() != 0:
        ph["skipped"] = "not root: cannot start another user's process"
        return ph
    try:
        pwd.getpwnam(OTHER_USER)
    except KeyError:
        made = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
        )
        if made.returncode != 0:
            ph["skipped"] = f"useradd failed: {made.stdout.decode().strip()}"
            return ph
        global MADE_USER
        MADE_USER = True
    try:
        foreign = start(gpu, {"name": "theirs", "cuda_gib": gib / 2}, user=OTHER_USER)
    except Exception as exc:
        ph["skipped"] = f"could not start a torch process as {OTHER_USER}: {exc}"
        gpu.stop_all()
        return ph
    pid = foreign.pids["theirs"]
    ph["seen_before"] = snapshot(foreign.pids)
    ph["run"] = run_module(base_args(work / "run" / "none.pid", kill_foreign=[pid]), work)
    expect(
        ph,
        "named but another user's: left alone, run fails listing it",
        ph["run"].get("failed") and not gone(foreign.procs["theirs"]) and f"pid {pid} " in ph["run"].get("msg", ""),
    )
    gpu.stop_all()
    ph["seen_after"] = snapshot({})
    return ph


# ---------------------------------------------------------------- main


PHASES = (phase_managed_tree, phase_foreign, phase_orphan, phase_other_user)


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0, help="GiB the main holders allocate (default 2)")
    parser.add_argument("--out", default=os.environ.get("OUT") or "gpu-verify-out")
    parser.add_argument("--simulate", action="store_true", help="rehearse without a GPU (stand-in nvidia-smi)")
    return parser.parse_args()


def write_report(out: Path, summary: dict) -> None:
    """DIR/gpu_cleanup.json and .log, written again after every phase: a run cut short still leaves what it saw."""
    (out / "gpu_cleanup.json").write_text(json.dumps(summary, indent=1, default=str))
    (out / "gpu_cleanup.log").write_text("\n".join(LOG) + "\n")


def could_not_run(out: Path, summary: dict, error: str) -> int:
    """Exit 3 with the reason in the report: nothing was tested, so no expectation failed."""
    summary["error"] = error
    log(error)
    write_report(out, summary)
    return 3


def record_facts(out: Path, summary: dict) -> None:
    """The facts module's view of the GPUs and its time, beside the cleanup's: what the roles would have seen."""
    facts_args = out / "facts-args.json"
    facts_args.write_text("{}")
    t0 = time.monotonic()
    facts = subprocess.run([sys.executable, "-m", FACTS, str(facts_args)], cwd=ROOT, stdout=subprocess.PIPE, check=False)
    summary["facts_wall_s"] = round(time.monotonic() - t0, 3)
    try:
        summary["facts"] = json.loads(facts.stdout)["facts"]
        log(f"facts: gpu={summary['facts']['gpu']} gpus={summary['facts']['gpus']} ({summary['facts_wall_s']} s)")
    except (ValueError, KeyError):
        summary["facts"] = facts.stdout.decode()[-2000:]
    facts_args.unlink()


def run_phases(gpu, work: Path, gib: float, out: Path, summary: dict) -> list:
    """Every phase, the report written after each; a phase that raises is recorded as an error and its processes
    stopped, so that the phases after it still run on a free GPU."""
    phases: list = []
    for fn in PHASES:
        log(f"phase {fn.__name__}")
        try:
            phases.append(fn(gpu, work, gib))
        except Exception:
            phases.append({"name": fn.__name__, "error": traceback.format_exc()})
            log(traceback.format_exc())
            gpu.stop_all()
        summary["phases"] = phases
        write_report(out, summary)
    return phases


def verdict(phases: list) -> tuple[bool, dict]:
    """(all_ok, short): every expectation held and no phase raised; one line a phase for the log and the reader."""
    checks = [e for p in phases for e in p.get("expectations", [])]
    all_ok = bool(checks) and all(e["ok"] for e in checks) and not any("error" in p for p in phases)
    short = {
        p["name"]: {
            "ok": all(e["ok"] for e in p.get("expectations", [])) and "error" not in p,
            "skipped": p.get("skipped"),
            "before_mib": (p.get("seen_before") or {}).get("memory_used_mib"),
            "module_seconds": (p.get("run") or {}).get("seconds"),
            "poll_free_after_s": ((p.get("run") or {}).get("_poll") or {}).get("free_after_s"),
            "msg": (p.get("run") or {}).get("msg"),
        }
        for p in phases
    }
    return all_ok, short


def main() -> int:
    opts = parse_options()
    global SIMULATE
    SIMULATE = opts.simulate
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threshold_mib": THRESHOLD, "gib": opts.gib}
    missing = missing_dependencies()
    if missing:
        return could_not_run(out, summary, "missing Python packages: " + "; ".join(missing) + ". tenacity is pure "
                             "Python: carry a folder with the `tenacity` package and run with PYTHONPATH=that/folder")
    from tests.fakes.gpu_holder import FakeGpu

    gpu = FakeGpu()  # its process-tree helpers; nvidia-smi is the real one unless --simulate
    if SIMULATE:
        os.environ["PATH"] = gpu.bin + os.pathsep + os.environ.get("PATH", "")
        summary["simulated"] = True
    summary["nvidia_smi_L"] = smi("-L").strip()
    summary["nvidia_smi_table_before"] = smi()
    record_facts(out, summary)
    if used_mib() >= THRESHOLD:
        code = could_not_run(out, summary, f"GPU 0 is already busy ({used_mib()} MiB) before the test; nothing was "
                                           "started")
        gpu.cleanup()
        return code
    work = Path(gpu.root) / "work"
    (work / "run").mkdir(parents=True)
    try:
        phases = run_phases(gpu, work, opts.gib, out, summary)
        summary["nvidia_smi_table_after"] = smi()
    finally:
        gpu.cleanup()
        if MADE_USER:
            subprocess.run(["userdel", OTHER_USER], check=False)
    summary["all_ok"], summary["short"] = verdict(phases)
    write_report(out, summary)
    log("summary: " + json.dumps(summary["short"], indent=1))
    log(f"all_ok={summary['all_ok']}; wrote {out / 'gpu_cleanup.json'}")
    return 0 if summary["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
