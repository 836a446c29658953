"""A run's normal end leaves no host lock record, and a record a dead run left is a warning, not a task result.

Real processes on local hosts (several inventory names of this machine share one lock file, as the handlers
target's A..E do): any record left behind would make the next run say it "took over the lock of a run that
died", and that notice must never count as an `ok` in the output or the recap.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

from engine.connection.client import WorkerClient
from engine.connection.hostlock import LOCK_NAME, new_record
from engine.inventory.manager import Host

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("A", "B", "C", "D", "E")


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.yaml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "dfp_root": str(tmp_path / "root")}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {name: host for name in NAMES}}}))
    return inv


def _play(tmp_path: Path) -> Path:
    """A and B fail; the rest go on to a second task (a failed host's worker ends with the run, as the others)."""
    path = tmp_path / "play.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "fail some", "fail": {"msg": "expected"}, "when": "inventory_hostname in ['A', 'B']"},
        {"name": "after", "command": {"argv": ["true"]}},
    ]}]))
    return path


def _run(tmp_path: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "invoke", "play", str(_play(tmp_path)), "-i", str(_inventory(tmp_path)),
            "--lock-wait", "0", "-v"]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)


def _oks(out: str) -> int:
    return sum(int(n) for n in re.findall(r"^\S+\s+: ok=(\d+)", out, re.MULTILINE))


def test_runs_with_failed_hosts_leave_no_record(tmp_path):
    lock = tmp_path / "root" / LOCK_NAME
    for _ in range(3):  # each run at once after the last, without waiting: the lock is free and has no record
        done = _run(tmp_path)
        assert done.returncode != 0 and "expected" in done.stdout, done.stdout + done.stderr
        assert lock.read_bytes() == b"", lock.read_text()
        assert "took over" not in done.stdout + done.stderr and "waiting for" not in done.stdout + done.stderr
        assert _oks(done.stdout) == 3, done.stdout


def test_a_dead_runs_record_is_a_warning_not_an_ok(tmp_path):
    lock = tmp_path / "root" / LOCK_NAME
    lock.parent.mkdir()
    lock.write_text(json.dumps(dict(new_record(), playbook="gone.yaml", worker_pid=1)))
    done = _run(tmp_path)
    assert "[WARNING]: took over the host lock" in done.stderr and "gone.yaml" in done.stderr, done.stderr
    assert "ok: [" not in done.stdout.split("TASK [")[0], done.stdout  # nothing between PLAY and the first task
    assert _oks(done.stdout) == 3 and lock.read_bytes() == b"", done.stdout


def test_a_connection_ended_between_requests_leaves_no_record(tmp_path):
    """The control node's end of the pipe closes without `exit` (its process ended): the worker lets the lock go
    as at a clean end."""
    host = Host("here", {"ansible_connection": "local", "ansible_python_interpreter": sys.executable})
    path = tmp_path / LOCK_NAME
    client = WorkerClient.open(host)
    assert client.lock(str(path), 0, new_record())["locked"]
    assert json.loads(path.read_text())["worker_pid"]
    client.transport.close()  # stdin closed, the worker waited for
    assert path.read_bytes() == b""
