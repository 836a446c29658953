"""Set-up shared by the fault tests (tests/faults/): a host whose vllm-service role starts the stand-in
server (tests/fakes/fake_vllm.py) exactly as vLLM would be started, the plays they run, and what the
servers they started left alive.

The stand-in is reached through vllm_env (PYTHONPATH=tests/fakes/vllm_pkg), so FAKE_VLLM_* variables
in vllm_env pick its behaviour; changing them changes the launch fingerprint like any other env change.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

from tests.fakes.vllm_processes import free_port, session_alive, started_pids

ROOT = Path(__file__).resolve().parents[2]
FAKE_PKG = ROOT / "tests" / "fakes" / "vllm_pkg"
PLAYBOOKS = ROOT / "playbooks"
START = "Start the vLLM server unless it runs with this launch, then prove it serves and measure acceptance"
SERVICE = """\
- name: vllm service
  hosts: all
  roles:
    - common
    - vllm-service
"""


def make_models(base: Path, user: str | None = None) -> dict:
    """A target and a drafter folder with just the config.json the launch reads."""
    target, drafter = base / "models" / "target", base / "models" / "dflash"
    for d in (target, drafter):
        d.mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (drafter / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    if user:
        pw = pwd.getpwnam(user)
        for p in [base / "models", target, drafter, *target.iterdir(), *drafter.iterdir()]:
            os.chown(p, pw.pw_uid, pw.pw_gid)
    return {"target_model": str(target), "drafter_model": str(drafter)}


def fake_env(mode: str = "normal", **fake: str) -> dict:
    """vllm_env for the stand-in: FAKE_VLLM_MODE=mode plus FAKE_VLLM_<KEY>=value for each keyword."""
    env = {"PYTHONPATH": str(FAKE_PKG), "FAKE_VLLM_MODE": mode}
    env.update({f"FAKE_VLLM_{k.upper()}": str(v) for k, v in fake.items()})
    return env


def server_vars(base: Path, mode: str = "normal", user: str | None = None, fake: dict | None = None, **over) -> dict:
    """Host variables for a vllm-service run against the stand-in, everything under `base`."""
    v = {
        "dfp_root": str(base / "dflash"),
        "venv_python": "/usr/bin/python3",  # the stand-in needs only the standard library
        "served_model_name": "tiny",
        "vllm_port": free_port(),
        "vllm_flavor": "cpu",
        "num_speculative_tokens": 3,
        "vllm_env": fake_env(mode, **(fake or {})),
        "readiness_timeout_s": 20,
        "vllm_stop_grace_s": 5,
        "smoke_max_tokens": 8,
        "acceptance_gate": "warn",
        "nvidia_smi": "/nonexistent/nvidia-smi",
    }
    v.update(make_models(base, user))
    v.update(over)
    return v


def paths_of(hv: dict) -> dict:
    root = Path(hv["dfp_root"])
    return {
        "pidfile": root / "run" / "vllm.pid",
        "running": root / "run" / "vllm.running.json",
        "log": root / "logs" / "vllm.log",
        "logs": root / "logs",
    }


def msgs(res) -> list:
    return [(t["task"], t["status"], t["msg"]) for t in res.tasks if t["status"] in ("failed", "changed")]


def result_of(res, task: str, host: str) -> dict:
    found = [r for r in res.find(task, host) if r.status != "skipped"]
    assert found, f"task {task!r} did not run on {host}: {msgs(res)}"
    return found[-1].result


def alive_servers(log_dir: Path) -> dict:
    """{server pid: [live members of its session]} for every server logged in log_dir that left any."""
    out = {}
    for pid in sorted(started_pids(log_dir)):
        members = session_alive(pid)
        if members:
            out[pid] = members
    return out


def invoke(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command a person types (`python3 -m invoke ...`), run from the repository as a real process."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def invoke_status(inventory: Path, host: str = "local", expect: int = 0) -> dict:
    """`invoke status --host HOST --json`: the host's status report; its exit code must be `expect` (0 running and
    healthy, 3 not running, 4 unknown: as systemctl status)."""
    out = invoke("status", "--host", host, "--inventory", str(inventory), "--json")
    assert out.returncode == expect, out.stdout + out.stderr
    return json.loads(out.stdout)[host]
