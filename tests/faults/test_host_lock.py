"""One run per host at a time, and a task sent at most once; against a real sshd host.

The control node is the real CLI (`python3 -m invoke play`) in subprocesses, so two runs are two
control-node processes as on a real fleet, and one can be SIGKILLed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from engine.api import run_playbook

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ssh


def write(tmp_path: Path, name: str, tasks: list, play_vars: dict | None = None) -> Path:
    path = tmp_path / name
    play = {"hosts": "all", "gather_facts": False, "tasks": tasks}
    if play_vars:
        play["vars"] = play_vars
    path.write_text(yaml.safe_dump([play]))
    return path


@pytest.fixture
def host_inv(tmp_path, ssh_host, shared_tmp):
    """An inventory of one sshd host whose dfp_root (where the lock lives) is a fresh folder."""
    root = shared_tmp / "root"
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": dict(ssh_host.inventory_vars(), dfp_root=str(root))}}}))
    return inv, root


def cli(playbook: Path, inv: Path, *extra: str, report: Path | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "invoke", "play", str(playbook), "-i", str(inv), *extra]
    if report:
        argv += ["--report", str(report)]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_file(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_two_concurrent_runs_lose_no_update(tmp_path, host_inv, shared_tmp):
    """300 lineinfile items from each of two runs at once: all 600 lines are there, both runs succeed."""
    inv, _ = host_inv
    target = shared_tmp / "lines.txt"
    runs = []
    for who in ("a", "b"):
        pb = write(tmp_path, f"{who}.yaml", [{
            "name": "many lines", "lineinfile": {"path": str(target), "line": f"{who}-{{{{ item }}}}", "create": True},
            "loop": "{{ range(300) | list }}"}])
        runs.append(cli(pb, inv, "--lock-wait", "120"))
    outputs = [p.communicate(timeout=240)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
    lines = target.read_text().splitlines()
    assert len(lines) == 600 and len(set(lines)) == 600


@pytest.fixture
def holder(tmp_path, host_inv, shared_tmp):
    """A real run (the CLI in a subprocess) holding the host lock for about 6 s; it must end well."""
    inv, _ = host_inv
    started = shared_tmp / "started"
    slow = write(tmp_path, "slow.yaml", [{"name": "hold", "command": {"argv": ["sh", "-c", f"touch {started}; sleep 6"]}}])
    first = cli(slow, inv)
    try:
        wait_for_file(started)
        yield first
    finally:
        assert first.wait(timeout=60) == 0, first.stdout.read()


def test_second_run_fails_naming_the_holder(tmp_path, host_inv, holder):
    inv, _ = host_inv
    quick = write(tmp_path, "quick.yaml", [{"name": "touch", "command": {"argv": ["true"]}}])
    report = tmp_path / "second.json"
    second = cli(quick, inv, "--lock-wait", "1", report=report)
    out = second.communicate(timeout=60)[0]
    assert second.returncode == 2, out
    row = json.loads(report.read_text())["tasks"][0]
    assert row["task"] == "Host lock" and row["status"] == "failed"
    for words in ("is locked by another run", "slow.yaml", f"pid {holder.pid}", "waited 1 s"):
        assert words in row["msg"], row["msg"]


def test_read_only_status_does_not_wait(host_inv, holder):
    inv, _ = host_inv
    began = time.monotonic()
    res = run_playbook("status", inv, lock_wait=0)
    assert time.monotonic() - began < 5
    assert not [r for r in res.results if r.task == "Host lock"], res.tasks
    assert res.exit_code == 0, res.tasks


def test_lock_of_a_killed_control_node_is_taken_over(tmp_path, host_inv, shared_tmp):
    inv, root = host_inv
    started = shared_tmp / "started"
    slow = write(tmp_path, "slow.yaml", [{"name": "hold", "command": {"argv": ["sh", "-c", f"touch {started}; sleep 2"]}}])
    first = cli(slow, inv)
    wait_for_file(started)
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    quick = write(tmp_path, "quick.yaml", [{"name": "touch", "command": {"argv": ["true"]}}])
    res = run_playbook(quick, inv, lock_wait=60)
    assert res.exit_code == 0, res.tasks
    took = [r for r in res.results if r.task == "Host lock"]
    assert took and "took over" in took[0].msg and "slow.yaml" in took[0].msg, res.tasks
    assert took[0].result["warnings"] == [took[0].msg]
    # A clean end leaves no record: the run after that takes the lock silently.
    again = run_playbook(quick, inv)
    assert again.exit_code == 0 and not [r for r in again.results if r.task == "Host lock"]


def _kill_ssh_sessions(ssh_host) -> int:
    """SIGKILL the per-connection sshd processes of this host (the listener stays): the connection drops."""
    killed = 0
    for child in psutil.Process(ssh_host.pid).children(recursive=True):
        if child.cmdline()[:1] and child.cmdline()[0].startswith("sshd"):
            child.kill()
            killed += 1
    return killed


def test_dropped_connection_does_not_send_the_task_again(tmp_path, host_inv, shared_tmp, ssh_host):
    inv, _ = host_inv
    runs = shared_tmp / "runs"
    started = shared_tmp / "started"
    pb = write(tmp_path, "pb.yaml", [
        {"name": "once", "command": {"argv": ["sh", "-c", f"echo run >> {runs}; touch {started}; sleep 3"]}},
        {"name": "after", "debug": {"msg": "after"}},
    ])
    import threading

    killed = []

    def drop():
        wait_for_file(started)
        killed.append(_kill_ssh_sessions(ssh_host))

    t = threading.Thread(target=drop)
    t.start()
    res = run_playbook(pb, inv)
    t.join(timeout=30)
    assert not t.is_alive()
    assert killed and killed[0] >= 1
    assert res.exit_code == 3, res.tasks
    assert [r.status for r in res.results] == ["unreachable"]
    assert "not sent again" in res.results[0].msg
    time.sleep(3.5)  # the first copy finishes on the host
    assert runs.read_text() == "run\n"
    started.unlink()
    again = run_playbook(pb, inv)
    assert again.exit_code == 0, again.tasks
    assert runs.read_text() == "run\nrun\n"


def test_a_lock_path_that_is_a_symlink_is_not_followed(tmp_path, host_inv, shared_tmp):
    """The lock file is the tool's own: a symlink planted at its name (to a file the user may write) is neither
    truncated nor written through; the host fails, naming the lock."""
    inv, root = host_inv
    root.mkdir(parents=True, exist_ok=True)
    target = shared_tmp / "precious.txt"
    target.write_text("keep me\n")
    target.chmod(0o666)
    (root / ".dflash-provision.lock").symlink_to(target)
    marker = shared_tmp / "ran"
    res = run_playbook(write(tmp_path, "pb.yaml", [{"name": "touch", "file": {"path": str(marker), "state": "directory"}}]), inv)
    assert res.exit_code == 2, res.tasks
    assert target.read_text() == "keep me\n"
    assert not marker.exists()
    msg = res.find("Host lock")[0].msg
    assert "cannot take the host lock" in msg and "symlink" in msg and "another run" not in msg, msg
