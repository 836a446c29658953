"""The kept-connection daemon SIGSTOPped (its socket still accepts, nothing answers): every socket operation with it
has a deadline. A new run bypasses it (a connection of its own) and names it, pid and socket, in the host's
warnings; `invoke disconnect` returns, naming it (exit 3); a run in flight through it ends at the host's silence
limit, naming it, and once the daemon runs again it closes that run's worker, whose task's processes stop and whose
host lock goes: the next run converges. Before the fix each of these waited for the daemon forever.

Real sshd, the real daemon and the real CLI in subprocesses.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import yaml

from tests.faults.faultlib import alive, cli, finish, lock_free, report_rows, wait_until
from tests.helpers import daemon_pid

pytestmark = pytest.mark.ssh

LOCK = ".dflash-provision.lock"


def files(tmp_path, shared_tmp, ssh_host, command: str) -> tuple[str, str]:
    """An inventory keeping the connection (the default) with a silence limit of 8 s, and a one-task playbook."""
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": dict(ssh_host.inventory_vars(), dfp_silent_s=8,
                                                                dfp_root=str(shared_tmp / "root"))}}}))
    book = tmp_path / f"pb-{len(list(tmp_path.glob('pb-*.yaml')))}.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "tasks": [{"name": "task", "command": {"argv": ["sh", "-c", command]}}]}]))
    return str(book), str(inv)


def worker_of(report) -> int:
    [row] = report_rows(report, "task")
    assert row["status"] == "changed", row
    return int(row["data"]["stdout"])


def test_a_stopped_daemon_is_bypassed_and_named_and_disconnect_returns(tmp_path, shared_tmp, ssh_host,
                                                                      kept_connections):
    book, inv = files(tmp_path, shared_tmp, ssh_host, "echo $PPID")
    first = tmp_path / "first.json"
    finish(cli(["play", book, "-i", inv], first), 120)
    kept = worker_of(first)
    pid, [sock] = daemon_pid(kept_connections), list(kept_connections.glob("*.sock"))
    os.kill(pid, signal.SIGSTOP)
    try:
        second = tmp_path / "second.json"
        run = cli(["play", book, "-i", inv], second)
        out = finish(run, 90)
        assert run.returncode == 0, out
        [note] = report_rows(second, "Connecting")
        for words in (f"pid {pid}", str(sock), "did not answer", "connection of this run's own"):
            assert words in note["msg"], note["msg"]
        assert worker_of(second) != kept  # not the daemon's kept worker: the run's own
        disconnect = cli(["disconnect"])
        out = finish(disconnect, 60)
        assert disconnect.returncode == 3 and f"pid {pid}" in out and "did not answer" in out, out
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_daemon_stopped_mid_run_ends_the_run_and_the_next_run_converges(tmp_path, shared_tmp, ssh_host,
                                                                          kept_connections):
    started, token = shared_tmp / "started", f"{int(time.time() * 1000) % 100000}.5"
    book, inv = files(tmp_path, shared_tmp, ssh_host, f"touch {started}; sleep 3{token}")
    report = tmp_path / "report.json"
    run = cli(["play", book, "-i", inv], report)
    wait_until("the task to start on the host", started.exists, 60)
    pid = daemon_pid(kept_connections)
    os.kill(pid, signal.SIGSTOP)
    try:
        out = finish(run, 60)  # 8 s of silence, the rest for a busy machine
    finally:
        os.kill(pid, signal.SIGCONT)  # it sees its client gone and closes the worker's channel
    assert run.returncode == 3, out
    [row] = report_rows(report, "task")
    assert row["status"] == "unreachable" and "went silent" in row["msg"] and f"pid {pid}" in row["msg"], row["msg"]
    wait_until("the task's processes to be stopped", lambda: not alive(token), 30)
    wait_until("the host lock to be let go", lambda: lock_free(shared_tmp / "root" / LOCK), 30)
    quick, _ = files(tmp_path, shared_tmp, ssh_host, "true")
    again = cli(["play", quick, "-i", inv, "--lock-wait", "0"])
    out = finish(again, 120)
    assert again.returncode == 0 and "is locked by another run" not in out, out
