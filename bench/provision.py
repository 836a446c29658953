"""Provision benchmarks of the `local` host: idempotent re-provision, and a cold provision from nothing.

Re-provision: `invoke provision --host local` with the server already up, as a whole CLI process
(wall), plus one in-process run_playbook of the same playbook whose module results carry the time the
host's worker spent inside modules (`_duration_s`): our own code's share is (wall - host) / wall.

Cold: the same command with a fresh `dfp_root` (and port) of the benchmark's own, so the machine's
real `local` environment is never touched; parts from the JSON report's task durations by role
(install, model generation, vLLM), then `vllm serve` alone, started by hand from the environment the
run built with the exact argv and environment of the server the run started, timed to /health 200.
overhead = total - install - generate - vllm_own. Everything started is stopped by PID at the end.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench.timing import RunFailed, run_timed, stats

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK = ROOT / "playbooks" / "provision.yaml"
INVENTORY = ROOT / "inventory.yaml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dflash-provision" / "bench"
COLD_ROOT = CACHE / "cold-root"
COLD_PORT = 8019
HAND_PORT = 8029
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _health(port: int, timeout: float = 1.0) -> int | None:
    try:
        with _OPENER.open(f"http://127.0.0.1:{port}/health", timeout=timeout) as resp:
            return resp.status
    except OSError:
        return None


def local_vars() -> dict:
    from engine.api import Inventory

    return Inventory(str(INVENTORY)).host_vars("local")


def local_server_up() -> tuple[bool, str]:
    """(up, how we know): `invoke status --host local --json` when it works, else pidfile + /health."""
    if (ROOT / "playbooks" / "status.yaml").exists():
        proc = subprocess.run(
            [sys.executable, "-m", "invoke", "status", "--host", "local", "--json"],
            cwd=str(ROOT),
            capture_output=True,
            text=True,
            timeout=120,
        )
        try:
            st = json.loads(proc.stdout).get("local", {})
            if st.get("running") and st.get("health") in (200, "200", "ok", True, "healthy"):
                return True, f"invoke status: running, PID {st.get('pid')}"
            return False, f"invoke status says running={st.get('running')}, health={st.get('health')}"
        except (ValueError, AttributeError):
            pass  # fall back to the pidfile
    v = local_vars()
    root = os.path.expanduser(str(v.get("dfp_root", "~/dflash")))
    pidfile = Path(root) / "run" / "vllm.pid"
    port = int(v.get("vllm_port", 8000))
    try:
        pid = int(json.loads(pidfile.read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return False, f"no readable pidfile at {pidfile}"
    if not Path(f"/proc/{pid}").exists():
        return False, f"the pidfile {pidfile} names PID {pid}, which is not running"
    code = _health(port)
    if code != 200:
        return False, f"PID {pid} runs but /health on port {port} answers {code}"
    return True, f"pidfile PID {pid}, /health 200 on port {port}"


def host_time(results: list[dict]) -> float:
    """Seconds the host's worker spent inside modules: `_duration_s` of each result (and loop item)."""
    total = 0.0
    for r in results:
        items = r.get("results") if isinstance(r.get("results"), list) else [r]
        for item in items:
            if isinstance(item, dict):
                total += float(item.get("_duration_s") or 0.0)
    return total


def reprovision(reps: int, log=print, extra_vars: dict | None = None, how: str = "") -> tuple:
    """(seconds or None, details, reason when None). extra_vars: provision another root than the real one."""
    if not PLAYBOOK.exists():
        return None, {}, "playbooks/provision.yaml does not exist yet (the roles are still being written)"
    if extra_vars is None:
        up, how = local_server_up()
        if not up:
            return None, {"server": how}, f"the local server is not up ({how}); run `invoke provision --host local` first"
    report = CACHE / "reprovision-report.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    evars = [a for k, v in (extra_vars or {}).items() for a in ("-e", f"{k}={v}")]
    argv = [sys.executable, "-m", "invoke", "provision", "--host", "local", *evars, "--report", str(report)]
    walls, changed = [], []
    for i in range(max(3, reps)):
        try:
            wall, _ = run_timed(argv, cwd=str(ROOT), timeout=600)
        except RunFailed as exc:
            return None, {"server": how}, f"invoke provision --host local failed: {exc}"
        data = json.loads(report.read_text())
        walls.append(wall)
        changed.append(sum(c.get("changed", 0) for c in data.get("recap", {}).values()))
        log(f"reprovision {i + 1}: {wall:.2f} s, changed={changed[-1]}")
    tasks = data.get("tasks", [])
    slowest = sorted(tasks, key=lambda t: -t.get("duration_s", 0))[:5]
    # The host's share: module time inside the worker, from one in-process run (the CLI report lacks it).
    from engine.api import run_playbook

    t0 = time.perf_counter()
    res = run_playbook(PLAYBOOK, INVENTORY, limit="local", extra_vars=dict(extra_vars or {}))
    in_wall = time.perf_counter() - t0
    host_s = host_time([r.result for r in res.results])
    st = stats(walls)
    detail = {
        "server": how,
        "cli": st,
        "changed_per_run": changed,
        "tasks": len(tasks),
        "sum_task_durations_s": round(sum(t.get("duration_s", 0) for t in tasks), 3),
        "slowest_tasks": [{k: t.get(k) for k in ("role", "task", "duration_s")} for t in slowest],
        "in_process_wall_s": round(in_wall, 3),
        "host_module_s": round(host_s, 3),
        "our_share_of_cli_wall": round(1 - host_s / st["median"], 3) if st["median"] else None,
        "our_share_of_in_process_wall": round(1 - host_s / in_wall, 3) if in_wall else None,
    }
    why = None
    if any(changed):
        why = f"the re-provision was not a no-change run: changed per run {changed}"
    return st["median"], detail, why


# -- cold provision --------------------------------------------------------------------------------


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


def _parts(tasks: list) -> dict:
    parts = {"install": 0.0, "generate": 0.0, "vllm": 0.0, "other": 0.0}
    for t in tasks:
        parts[classify_cold_task(t.get("role"), t.get("task", ""))] += float(t.get("duration_s") or 0)
    return {k: round(v, 3) for k, v in parts.items()}


def _stop_group(pid: int, grace: float = 10.0) -> None:
    """Stop a process group we started (its PGID is the leader's PID): SIGINT, then SIGKILL."""
    try:
        os.killpg(pid, signal.SIGINT)
    except OSError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except OSError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


CACHE_VARS = ("VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def hand_vllm(pidfile: Path, port: int, log_path: Path, fresh_cache: Path | None = None, timeout: float = 600) -> float:
    """Start the same server by hand (argv + environment of the running one, another port): s to /health 200.

    fresh_cache: point vLLM's caches (VLLM_CACHE_ROOT and the inductor/triton caches under it) at this
    empty folder, so the start pays what a first start pays, like the provision's did.
    """
    pid = int(json.loads(pidfile.read_text())["pid"])
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    argv = [a.decode() for a in argv]
    env = dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0") if "=" in kv)
    if fresh_cache is not None:
        shutil.rmtree(fresh_cache, ignore_errors=True)
        fresh_cache.mkdir(parents=True)
        for var in CACHE_VARS:
            if var in env or var == "VLLM_CACHE_ROOT":
                env[var] = str(fresh_cache if var == "VLLM_CACHE_ROOT" else fresh_cache / var.split("_")[0].lower())
    if "--port" in argv:
        argv[argv.index("--port") + 1] = str(port)
    with open(log_path, "wb") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"the hand-started vLLM exited with {proc.returncode}; see {log_path}")
            if _health(port, timeout=0.5) == 200:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"the hand-started vLLM was not healthy within {timeout} s")
    finally:
        _stop_group(proc.pid)
        proc.wait(timeout=30)


def cold(log=print, while_up=None, extra_vars: dict | None = None) -> tuple:
    """(overhead s or None, details, reason when None). while_up(extra_vars) runs while the server is up."""
    if not PLAYBOOK.exists():
        return None, {}, "playbooks/provision.yaml does not exist yet (the roles are still being written)"
    shutil.rmtree(COLD_ROOT, ignore_errors=True)
    COLD_ROOT.parent.mkdir(parents=True, exist_ok=True)
    report = CACHE / "cold-report.json"
    given = {"dfp_root": str(COLD_ROOT), "vllm_port": COLD_PORT, **(extra_vars or {})}
    evars = [a for k, v in given.items() for a in ("-e", f"{k}={v}")]
    argv = [sys.executable, "-m", "invoke", "provision", "--host", "local", *evars, "--report", str(report)]
    detail: dict = {"dfp_root": str(COLD_ROOT), "port": COLD_PORT}
    try:
        log(f"cold provision into {COLD_ROOT} (builds the serving environment: minutes)")
        total, _ = run_timed(argv, cwd=str(ROOT), timeout=1800)
        data = json.loads(report.read_text())
        parts = _parts(data.get("tasks", []))
        detail.update(total_s=round(total, 2), parts=parts)
        log(f"cold provision: {total:.1f} s, parts {parts}")
        ready = [float(m) for t in data.get("tasks", []) for m in re.findall(r"ready in ([0-9.]+) s", t.get("msg", ""))]
        detail["vllm_role_ready_s"] = ready[0] if ready else None  # the module's own launch -> /health 200
        pidfile = COLD_ROOT / "run" / "vllm.pid"
        own = hand_vllm(pidfile, HAND_PORT, CACHE / "hand-vllm.log", fresh_cache=CACHE / "hand-vllm-cache")
        warm = hand_vllm(pidfile, HAND_PORT, CACHE / "hand-vllm.log")
        shutil.rmtree(CACHE / "hand-vllm-cache", ignore_errors=True)
        detail.update(vllm_own_s=round(own, 2), vllm_own_warm_cache_s=round(warm, 2))
        overhead = total - parts["install"] - parts["generate"] - own
        detail["overhead_s"] = round(overhead, 2)
        if detail["vllm_role_ready_s"] is not None:  # everything but install, generation and vLLM's launch -> ready
            detail["overhead_vs_role_ready_s"] = round(total - parts["install"] - parts["generate"] - ready[0], 2)
        log(
            f"vllm serve by hand: {own:.1f} s to /health 200 with empty caches, {warm:.1f} s with the run's; "
            f"overhead {overhead:.2f} s"
        )
        if while_up is not None:
            while_up(given)
        return round(overhead, 2), detail, None
    except (RunFailed, RuntimeError, OSError, ValueError, KeyError) as exc:
        return None, detail, f"cold provision failed: {type(exc).__name__}: {exc}"
    finally:
        try:
            server = int(json.loads((COLD_ROOT / "run" / "vllm.pid").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            server = None
        subprocess.run(
            [sys.executable, "-m", "invoke", "teardown", "--host", "local", "--purge", *evars],
            cwd=str(ROOT),
            capture_output=True,
            timeout=300,
        )
        if server and Path(f"/proc/{server}").exists():  # teardown did not stop it: its process group, by PID
            _stop_group(server)
        shutil.rmtree(COLD_ROOT, ignore_errors=True)
