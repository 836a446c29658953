"""Readiness and crash detection latency of library/vllm_server.py against the stand-in server.

The module runs in this process (the same code the worker runs on a host), starting
tests/fakes/fake_vllm.py through the real launch path (`PYTHON -m vllm.entrypoints.cli.main serve`,
with the fake's package first on PYTHONPATH). The bench keeps its own clocks, on the same monotonic
clock as the module:
- readiness: a prober thread asks /health every 2 ms; the latency runs from its first 200 to the
  module returning `ready` (and, for reference, to the module moving past its /health step, seen
  through the module's progress messages);
- crash: the server is SIGKILLed by the bench while the module waits for readiness; the latency runs
  from the kill (the death) to the module returning its failure. That is the headline figure.
- faults the server announces (fake modes crash_first_request and crash_start: a traceback in the
  log, then an exit): watcher threads read /proc/PID/stat and the log every millisecond; the latency
  runs from the first of (an ERROR/Traceback line in the log, the process gone or a zombie) to the
  module returning its failure (it often stops the server itself on the log line, before the exit).
Every server started here is stopped by PID (its process group) when a scenario ends.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fakes" / "fake_vllm.py"
FAKE_PKG = ROOT / "tests" / "fakes" / "vllm_pkg"
MODULE = ROOT / "library" / "vllm_server.py"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def missing() -> str | None:
    """None when the pieces exist, else the reason the latencies cannot be measured."""
    for path, what in (
        (MODULE, "the vllm_server module"),
        (FAKE, "the stand-in server"),
        (FAKE_PKG, "the stand-in's vllm package"),
    ):
        if not path.exists():
            return f"{what} ({path.relative_to(ROOT)}) does not exist yet"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _state(pid: int) -> str | None:
    """The process's state letter from /proc/PID/stat, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def group_members(pgid: int) -> list[int]:
    """PIDs (not zombies) whose process group is pgid: what is left of a server we started."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(entry))
    return out


def _pid_from(pidfile: Path, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return int(json.loads(pidfile.read_text())["pid"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.002)
    raise RuntimeError(f"no pidfile at {pidfile} within {timeout} s")


class Prober(threading.Thread):
    """Asks /health every 2 ms; `first_200` is the monotonic time of the first 200."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/health"
        self.first_200: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.first_200 is None:
            try:
                with _OPENER.open(self.url, timeout=0.5) as resp:
                    if resp.status == 200:
                        self.first_200 = time.monotonic()
                        return
            except OSError:
                pass
            time.sleep(0.002)


class FaultWatch(threading.Thread):
    """Every millisecond: /proc/PID/stat (gone or zombie: `died`) and the log (ERROR/Traceback: `logged`)."""

    def __init__(self, pidfile: Path, log: Path) -> None:
        super().__init__(daemon=True)
        self.pidfile, self.log = pidfile, log
        self.pid: int | None = None
        self.died: float | None = None
        self.logged: float | None = None
        self.stop = threading.Event()

    def _log_has_fault(self) -> bool:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return False
        return " ERROR " in text or "Traceback" in text

    def run(self) -> None:
        try:
            self.pid = _pid_from(self.pidfile)
        except RuntimeError:
            return
        while not self.stop.is_set() and self.died is None:
            now = time.monotonic()
            if self.logged is None and self._log_has_fault():
                self.logged = now
            if _state(self.pid) in (None, "Z", "X"):
                self.died = now
            time.sleep(0.001)

    def fault(self) -> float | None:
        seen = [t for t in (self.died, self.logged) if t is not None]
        return min(seen) if seen else None


class Scenario:
    """One fake server managed by the module: render, start (timed), and always stop by PID."""

    def __init__(self, root: Path, mode: str, ready_s: float) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"lat-{mode}-", dir=root))
        self.port = _free_port()
        target = self.dir / "target"
        target.mkdir()
        (target / "config.json").write_text(
            json.dumps(
                {
                    "architectures": ["Qwen3ForCausalLM"],
                    "model_type": "qwen3",
                    "hidden_size": 64,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 4,
                    "num_key_value_heads": 2,
                    "vocab_size": 512,
                }
            )
        )
        self.pidfile = self.dir / "run" / "vllm.pid"
        self.args = {
            "pidfile": str(self.pidfile),
            "venv_python": sys.executable,
            "target_model": str(target),
            "served_model_name": "bench",
            "port": self.port,
            "flavor": "cpu",
            "log": str(self.dir / "logs" / "vllm.log"),
            "env": {"PYTHONPATH": str(FAKE_PKG), "FAKE_VLLM_MODE": mode, "FAKE_VLLM_READY_S": str(ready_s)},
            "use_systemd": False,
            "readiness_timeout_s": 60,
            "stop_grace_s": 2,
            "smoke_requests": 1,
            "smoke_max_tokens": 4,
        }
        self.progress: list = []
        self.pgid: int | None = None  # the server's process group (its PID: it starts a new session)

    def _remember_group(self) -> None:
        try:
            self.pgid = _pid_from(self.pidfile, timeout=30)
        except RuntimeError:
            pass

    def call(self, state: str) -> tuple:
        """(result, monotonic time the module returned)."""
        vs, common = _modules()
        if state == "started":
            threading.Thread(target=self._remember_group, daemon=True).start()
        ctx = common.Context(progress=lambda msg: self.progress.append((time.monotonic(), str(msg))))
        res = common.execute(vs.ARGS, vs.run, dict(self.args, state=state), ctx, "vllm_server")
        return res, time.monotonic()

    def render(self) -> None:
        """Write the fake's launch (state=rendered), the step before every timed start."""
        res, _ = self.call("rendered")
        if res.get("failed"):
            raise RuntimeError(f"rendering the fake's launch failed: {res.get('msg')}")

    def leftovers(self) -> list[int]:
        return group_members(self.pgid) if self.pgid else []

    def cleanup(self) -> None:
        try:
            self.call("absent")
        except Exception:  # noqa: S110 - best-effort clean-up; the process group is swept right after
            pass
        # Whatever is left of the process group this scenario started (its PGID is the server's PID).
        if self.leftovers():
            try:
                os.killpg(self.pgid, signal.SIGKILL)
            except OSError:
                pass


def _modules():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # library.NAME and dflash_host.NAME
    from dflash_host import module
    from library import vllm_server

    return vllm_server, module


def ready_once(root: Path) -> dict:
    sc = Scenario(root, "normal", ready_s=1.0)
    prober = Prober(sc.port)
    try:
        sc.render()
        prober.start()
        res, returned = sc.call("started")
        prober.stop.set()
        prober.join(2)
        if res.get("failed") or prober.first_200 is None:
            raise RuntimeError(f"the fake did not become ready: {res.get('msg')}")
        past_health = next((t for t, msg in sc.progress if "/v1/models" in msg), None)
        return {
            "reported_s": round(returned - prober.first_200, 4),
            "health_step_s": round(past_health - prober.first_200, 4) if past_health else None,
            "module_ready_s": res.get("ready_s"),
        }
    finally:
        prober.stop.set()
        sc.cleanup()


def killed_once(root: Path) -> dict:
    """SIGKILL the server while the module waits for readiness: death = the kill."""
    sc = Scenario(root, "slow", ready_s=60.0)
    out: dict = {}
    try:
        sc.render()
        box: dict = {}

        def start() -> None:
            box["res"], box["returned"] = sc.call("started")

        worker = threading.Thread(target=start, daemon=True)
        worker.start()
        pid = _pid_from(sc.pidfile)
        time.sleep(0.8)  # well inside the readiness wait
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        worker.join(30)
        if "res" not in box:
            raise RuntimeError("the module did not return within 30 s of the kill")
        if not box["res"].get("failed"):
            raise RuntimeError(f"the module did not report the killed server: {box['res'].get('msg')}")
        time.sleep(0.3)
        out = {
            "reported_s": round(box["returned"] - killed, 4),
            "msg": str(box["res"].get("msg"))[:200],
            # processes of the killed server's group still running after the module reported the failure
            "left_running_after_failure": len(sc.leftovers()),
        }
        return out
    finally:
        sc.cleanup()


def crash_once(root: Path, mode: str) -> dict:
    """The fake fails by itself (mode crash_first_request or crash_start): the fault seen by a watcher."""
    sc = Scenario(root, mode, ready_s=0.3)
    watch = FaultWatch(sc.pidfile, Path(sc.args["log"]))
    try:
        sc.render()
        watch.start()
        res, returned = sc.call("started")
        watch.join(2)
        if not res.get("failed"):
            raise RuntimeError(f"the module did not report the crash ({mode}): {res.get('msg')}")
        fault = watch.fault()
        if fault is None:
            raise RuntimeError(f"the fake ({mode}) was not seen failing")
        time.sleep(0.3)
        return {
            "left_running_after_failure": len(sc.leftovers()),
            "reported_s": round(returned - fault, 4),
            "first_sign": "log" if fault == watch.logged else "exit",
            "msg": str(res.get("msg"))[:200],
        }
    finally:
        watch.stop.set()
        sc.cleanup()


def run_section(reps: int = 1, log=print) -> dict:
    why = missing()
    if why:
        return {"why": why}
    root = Path(tempfile.mkdtemp(prefix="dfp-bench-latency-"))
    out: dict = {"how": "library/vllm_server.py in-process against tests/fakes/fake_vllm.py"}
    try:
        ready = [ready_once(root) for _ in range(reps)]
        log(f"latency: ready {[r['reported_s'] for r in ready]} s after the first /health 200")
        killed = [killed_once(root) for _ in range(reps)]
        first_req = [crash_once(root, "crash_first_request") for _ in range(reps)]
        at_start = [crash_once(root, "crash_start") for _ in range(reps)]
        log(
            f"latency: failure reported {[r['reported_s'] for r in killed]} s after SIGKILL, "
            f"{[r['reported_s'] for r in first_req]} after the first sign of a crash on the first request, "
            f"{[r['reported_s'] for r in at_start]} of a crash at start"
        )
        med = lambda rows: round(statistics.median(r["reported_s"] for r in rows), 4)  # noqa: E731
        out.update(
            ready=ready,
            killed=killed,
            crash_first_request=first_req,
            crash_start=at_start,
            ready_latency_s=med(ready),
            crash_latency_s=med(killed),
            fault_latency_worst_s=max(med(first_req), med(at_start)),
        )
        return out
    except Exception as exc:
        out["why"] = f"{type(exc).__name__}: {exc}"
        return out
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
