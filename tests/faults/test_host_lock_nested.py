"""A run started by a task of the run holding the host lock is let in (docs/SAFETY.md, One run per host).

Real processes on a local host: the outer run (the CLI) holds the lock; its command task runs the CLI again
on the same host as the same user, which would otherwise wait for its own parent. A run that is not a
descendant of the holder still waits and fails naming the holder.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _play(path: Path, tasks: list) -> Path:
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    return path


def _inventory(tmp_path: Path, *names: str) -> Path:
    inv = tmp_path / "inv.yaml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "dfp_root": str(tmp_path / "root")}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {name: host for name in names or ("here",)}}}))
    return inv


def _cli(playbook: Path, inv: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "invoke", "play", str(playbook), "-i", str(inv), *extra]


def test_a_run_started_by_the_holders_task_is_let_in(tmp_path):
    """Two inventory names of this machine: one worker holds the lock, the other shares it; a run started by
    a task of either is let in."""
    inv = _inventory(tmp_path, "one", "two")
    inner = _play(tmp_path / "inner.yaml", [{"file": {"path": str(tmp_path / "{{ inventory_hostname }}"),
                                                      "state": "touch"}}])
    outer = _play(tmp_path / "outer.yaml", [{"command": {"argv": _cli(inner, inv, "--lock-wait", "20"),
                                                          "chdir": str(ROOT)}}])
    started = time.monotonic()
    done = subprocess.run(_cli(outer, inv, "--lock-wait", "5"), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "one").exists() and (tmp_path / "two").exists() and time.monotonic() - started < 30


def test_a_run_not_started_by_the_holder_still_waits(tmp_path):
    inv = _inventory(tmp_path)
    flag = tmp_path / "holding"
    hold = _play(tmp_path / "hold.yaml", [{"command": {"argv": ["sh", "-c", f"touch {flag}; sleep 8"]}}])
    other = _play(tmp_path / "other.yaml", [{"file": {"path": str(tmp_path / "made"), "state": "touch"}}])
    holder = subprocess.Popen(_cli(hold, inv), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not flag.exists():
            assert time.monotonic() < deadline and holder.poll() is None, "the holder never started its task"
            time.sleep(0.05)
        second = subprocess.run(_cli(other, inv, "--lock-wait", "1"), cwd=ROOT, capture_output=True, text=True,
                                timeout=60)
        assert second.returncode != 0 and "lock" in (second.stdout + second.stderr)
        assert not (tmp_path / "made").exists()
    finally:
        assert holder.wait(timeout=60) == 0
