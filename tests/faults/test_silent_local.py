"""A `local` host whose worker is stopped (SIGSTOP) mid-task: given up after `dfp_silent_s` like a remote one (exit 3,
named as silent), and closing it continues it first, so it sees its connection end and stops its task's processes
(a shell, a child in the background) before it exits. The real CLI in a subprocess. And a worker whose stdin reader
waits while it exits ends cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import yaml

from engine.connection.transport import LocalTransport
from engine.inventory.manager import Host
from tests.faults.faultlib import alive, cli, finish, report_rows, wait_until


def test_a_stopped_local_worker_is_given_up_and_its_task_stopped(tmp_path):
    started, token = tmp_path / "started", f"{int(time.time() * 1000) % 100000}.75"
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"local": {"ansible_connection": "local", "dfp_silent_s": 4,
                                                               "dfp_root": str(tmp_path / "root")}}}}))
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": {"dfp_root": "{{ dfp_root }}"},
                                     "tasks": [{"name": "endless", "command": {"argv": [
                                         "sh", "-c", f"sleep 3{token} & echo $PPID > {started}; sleep 4{token}"]}}]}]))
    report = tmp_path / "report.json"
    run = cli(["play", str(book), "-i", str(inv)], report)
    wait_until("the task to start", lambda: started.exists() and started.read_text().strip(), 60)
    worker = int(started.read_text())
    os.kill(worker, signal.SIGSTOP)
    try:
        out = finish(run, 60)
        assert run.returncode == 3, out
        [row] = report_rows(report, "endless")
        assert row["status"] == "unreachable" and "went silent" in row["msg"], row["msg"]
        assert "nothing came from it for 4 s" in row["msg"], row["msg"]
        wait_until("the task's processes to be stopped", lambda: not alive(token), 20)
    finally:
        for p in alive(token):
            p.kill()
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker, signal.SIGCONT)


def test_a_worker_ends_cleanly_while_its_reader_waits_on_stdin():
    """`exit` answered while stdin is still open (its reader thread blocked in a read): the worker's own end is
    clean, exit status 0 (a thread in sys.stdin's buffered read made the interpreter's exit abort)."""
    transport = LocalTransport(Host("local", {"ansible_connection": "local"}))
    transport.open()
    try:
        transport.request({"op": "hello", "runtime": ""})
        assert transport.request({"op": "exit"})["bye"]
        assert transport.proc.wait(30) == 0, list(transport.stderr_tail)
    finally:
        transport.close()
