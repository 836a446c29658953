"""A host that goes silent mid-task: the TCP connection stays up but nothing comes through it (a proxy on loopback
that stops forwarding), or the worker on the host is stopped (SIGSTOP). The control node does not wait past the
task's `timeout` and a margin, nor, for a task without one, past `dfp_silent_s` without a word (the worker beats
while a task runs); the host is out of the run (exit 3) named as silent, the task was sent once, and once the path
breaks for good the host's worker stops the task's processes and lets the host lock go: the next run converges.

The control node is the real CLI in a subprocess, against real sshd; bounds are generous (a busy 2-core machine),
and before the fix each of these runs hung until the bound.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import yaml

from tests.faults.faultlib import FreezableProxy, alive, cli, finish, lock_free, report_rows, wait_until

pytestmark = pytest.mark.ssh

LOCK = ".dflash-provision.lock"


@pytest.fixture
def proxy(ssh_host):
    p = FreezableProxy((ssh_host.address, ssh_host.port))
    yield p
    p.close()


@pytest.fixture(params=["direct", "kept"])
def connection(request, monkeypatch):
    """ssh options of the two ways a run reaches a host: its own connection, or through the kept-connection
    daemon (the default), whose socket folder is then the test's own."""
    if request.param == "kept":
        request.getfixturevalue("kept_connections")
        return {}
    return {"ansible_ssh_common_args": "-o ControlPersist=no"}


def book(tmp_path, name: str, task: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"dfp_root": "{{ root }}"},
                                     "tasks": [task, {"name": "after", "debug": {"msg": "after"}}]}]))
    return str(path)


def inventory(tmp_path, hostvars: dict, root) -> str:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": dict(hostvars, root=str(root))}}}))
    return str(inv)


def silent_row(report, task: str) -> dict:
    [row] = report_rows(report, task)
    assert row["status"] == "unreachable", row
    assert "h1" in row["msg"] and "went silent" in row["msg"] and "not sent again" in row["msg"], row["msg"]
    return row


def converges(tmp_path, inv: str, root, runs) -> None:
    """Once the path is cut the host's worker goes with the task's processes and the lock; the next run works."""
    wait_until("the host lock to be let go", lambda: lock_free(root / LOCK), 30)
    quick = book(tmp_path, "quick.yaml", {"name": "again", "command": {"argv": ["sh", "-c", f"echo again >> {runs}"]}})
    out = finish(cli(["play", quick, "-i", inv, "--lock-wait", "0"]), 120)
    assert "is locked by another run" not in out, out
    assert runs.read_text() == "run\nagain\n", out


def test_a_host_silent_mid_task_is_given_up_at_the_tasks_timeout(tmp_path, shared_tmp, ssh_host, proxy, connection):
    """`timeout: 10` and a silence limit far above it: the task's timeout (and a margin) is what ends the wait."""
    root, runs, started = shared_tmp / "root", shared_tmp / "runs", shared_tmp / "started"
    inv = inventory(tmp_path, dict(proxy.host_vars(ssh_host, tmp_path), dfp_silent_s=600, **connection), root)
    task = {"name": "quiet", "timeout": 10,
            "command": {"argv": ["sh", "-c", f"echo run >> {runs}; touch {started}; sleep 60"]}}
    report = tmp_path / "report.json"
    run = cli(["play", book(tmp_path, "pb.yaml", task), "-i", inv], report)
    wait_until("the task to start on the host", started.exists, 60)
    proxy.freeze()
    frozen = time.monotonic()
    out = finish(run, 60)  # 10 s of timeout, 10 s of margin, the rest for a busy machine
    assert run.returncode == 3, out
    msg = silent_row(report, "quiet")["msg"]
    assert "within the task's timeout of 10 s" in msg, msg
    assert time.monotonic() - frozen >= 5  # the wait was the task's, not an error of the frozen connection
    assert runs.read_text() == "run\n" and not report_rows(report, "after")
    proxy.cut()
    proxy.thaw()
    converges(tmp_path, inv, root, runs)


@pytest.mark.parametrize("fault", ["path frozen", "worker stopped"])
def test_a_host_silent_during_a_task_without_timeout_is_given_up_after_dfp_silent_s(tmp_path, shared_tmp, ssh_host,
                                                                                    proxy, fault):
    """No `timeout`: nothing at all (not even the worker's beat) for dfp_silent_s seconds ends the wait. Once the
    connection is really gone the worker stops the task's whole process tree (`sleep` below a shell) and the lock."""
    root, runs, started = shared_tmp / "root", shared_tmp / "runs", shared_tmp / "started"
    token = f"{int(time.time() * 1000) % 100000}.25"
    inv = inventory(tmp_path, dict(proxy.host_vars(ssh_host, tmp_path), dfp_silent_s=6,
                                   ansible_ssh_common_args="-o ControlPersist=no"), root)
    task = {"name": "endless", "command": {"argv": [
        "sh", "-c", f"echo run >> {runs}; sleep 3{token} & echo $PPID > {started}; sleep 4{token}; wait"]}}
    report = tmp_path / "report.json"
    run = cli(["play", book(tmp_path, "pb.yaml", task), "-i", inv], report)
    wait_until("the task to start on the host", lambda: started.exists() and started.read_text().strip(), 60)
    worker = int(started.read_text())
    if fault == "path frozen":
        proxy.freeze()
    else:
        os.kill(worker, signal.SIGSTOP)
    try:
        out = finish(run, 60)
    finally:
        if fault == "worker stopped":
            os.kill(worker, signal.SIGCONT)  # it reads the end of its closed connection now
    assert run.returncode == 3, out
    assert "nothing came from it for 6 s" in silent_row(report, "endless")["msg"]
    if fault == "path frozen":  # the host cannot know yet that its run is gone: its connection looks open
        assert alive(f"sleep 3{token}")
    proxy.cut()
    proxy.thaw()
    wait_until("the task's processes to be stopped", lambda: not alive(token), 30)
    converges(tmp_path, inv, root, runs)


def test_a_long_quiet_task_is_not_taken_for_a_silent_host(tmp_path, shared_tmp, ssh_host, kept_connections):
    """The worker beats while a task runs, through the kept-connection daemon too: a task silent for longer than
    dfp_silent_s (8 s against 3 s) is a task, not a silent host."""
    inv = inventory(tmp_path, dict(ssh_host.inventory_vars(), dfp_silent_s=3), shared_tmp / "root")
    report = tmp_path / "report.json"
    out = finish(cli(["play", book(tmp_path, "pb.yaml", {"name": "slow", "command": {"argv": ["sleep", "8"]}}),
                      "-i", inv], report), 120)
    assert [r["status"] for r in report_rows(report)] == ["changed", "ok"], out
