"""ControlPersist (engine/persist.py, engine/persist_daemon.py): with `-o ControlMaster=auto -o ControlPersist=N`
a run leaves the host's connection and an idle worker to a daemon, and the next run uses them: no login and no
python start on the host. Real sshd, real daemon; the worker is seen from the host (the PID of the process that
runs a task's command is the worker's)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
import yaml

from engine import persist
from engine.client import WorkerClient
from engine.inventory import Host
from tests.helpers import daemon_pid as _daemon_pid
from tests.helpers import play
from tests.helpers import wait_gone as _wait_gone

pytestmark = pytest.mark.ssh

BOOK = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Who runs me\n      command: {argv: [sh, -c, 'echo $PPID']}\n")
KEEP = "-o ControlMaster=auto -o ControlPersist={}"


def _inventory(tmp_path: Path, h, persist_value: str | None, name: str = "inventory.yaml") -> Path:
    host = dict(h.inventory_vars())
    if persist_value is not None:
        host["ansible_ssh_common_args"] = KEEP.format(persist_value)
    inv = tmp_path / name
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": host}}}))
    return inv


def _worker_pid(res) -> int:
    assert res.exit_code == 0, [(t["task"], t["msg"]) for t in res.tasks]
    return int(res.find("Who runs me", "h")[0].result["stdout"])


def test_the_next_run_uses_the_kept_worker_and_the_lock_is_free_between_runs(tmp_path, ssh_hosts, kept_connections):
    inv = _inventory(tmp_path, ssh_hosts[0], "60s")
    first = _worker_pid(play(BOOK, inv, tmp_path))
    second = _worker_pid(play(BOOK, inv, tmp_path))
    assert first == second and psutil.pid_exists(first)
    # A run without ControlPersist gets its own worker, and the kept one holds no host lock between runs.
    direct = _worker_pid(play(BOOK, _inventory(tmp_path, ssh_hosts[0], None, "direct.yaml"), tmp_path))
    assert direct != first
    assert (kept_connections / f"{persist.code_key()}.sock").exists()
    assert oct(kept_connections.stat().st_mode & 0o777) == "0o700"


def test_without_control_persist_every_run_starts_its_worker(tmp_path, ssh_hosts, kept_connections):
    inv = _inventory(tmp_path, ssh_hosts[0], None)
    first = _worker_pid(play(BOOK, inv, tmp_path))
    assert _worker_pid(play(BOOK, inv, tmp_path)) != first
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE
    assert not kept_connections.exists()


def test_an_idle_connection_closes_after_its_time_and_the_daemon_ends(tmp_path, ssh_hosts, kept_connections):
    worker = _worker_pid(play(BOOK, _inventory(tmp_path, ssh_hosts[0], "1"), tmp_path))
    daemon = _daemon_pid(kept_connections)
    assert daemon and psutil.pid_exists(daemon)
    assert _wait_gone(worker) and _wait_gone(daemon)
    assert not (kept_connections / f"{persist.code_key()}.sock").exists()


def test_a_kept_worker_that_died_is_replaced(tmp_path, ssh_hosts, kept_connections):
    inv = _inventory(tmp_path, ssh_hosts[0], "60")
    first = _worker_pid(play(BOOK, inv, tmp_path))
    psutil.Process(first).kill()
    assert _wait_gone(first)
    second = _worker_pid(play(BOOK, inv, tmp_path))
    assert second != first


def test_a_session_that_ends_without_release_does_not_leave_its_worker(tmp_path, ssh_hosts, kept_connections):
    """A run that dies mid-way (no `release`): its worker is not handed to the next run, and the host lock it held
    is free for that run."""
    inv = _inventory(tmp_path, ssh_hosts[0], "60")
    host = Host("h", yaml.safe_load(inv.read_text())["all"]["hosts"]["h"])
    client = WorkerClient.open(host)
    assert client.lock("~/.dfp-test-lock", 0, {"run_id": "dying"})["locked"]
    died = client.run("command", {"argv": ["sh", "-c", "echo $PPID"]}, check=False, diff=False)["stdout"]
    client.transport.close()  # as a killed run: the socket closes, no release
    assert _wait_gone(int(died))
    again = WorkerClient.open(host)
    try:
        assert again.lock("~/.dfp-test-lock", 0, {"run_id": "next"})["locked"]
    finally:
        again.close()


def test_stop_closes_the_kept_connections(tmp_path, ssh_hosts, kept_connections):
    worker = _worker_pid(play(BOOK, _inventory(tmp_path, ssh_hosts[0], "yes"), tmp_path))
    daemon = _daemon_pid(kept_connections)
    assert persist.stop()
    assert _wait_gone(worker) and daemon and _wait_gone(daemon)
    assert not persist.stop()


def test_a_socket_folder_others_can_enter_is_refused_and_nothing_is_sent(tmp_path, ssh_hosts, kept_connections):
    kept_connections.mkdir(mode=0o755)
    os.chmod(kept_connections, 0o755)
    res = play(BOOK, _inventory(tmp_path, ssh_hosts[0], "60"), tmp_path)
    assert res.exit_code == 4
    text = " ".join(str(t.get("msg")) for t in res.tasks) + str(getattr(res, "error", ""))
    assert "is not a private folder" in text and "chmod 700" in text, text
    assert not list(kept_connections.iterdir())
