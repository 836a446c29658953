"""The CLI killed (SIGTERM, SIGKILL) while a task runs a long child process on the host, over a connection of the
run's own and through the kept-connection daemon: the host's worker sees its connection end, stops the task's
whole process tree (a shell, a child in the background, one moved to a session of its own) and exits, so the host
lock is free within seconds and the next run is not refused. A daemon the task left on purpose (a session of its
own, /dev/null on its stdin, stdout and stderr, as the vLLM server is started) keeps running. Before the fix the task ran on (300 s here, as long
as a slow Hub takes) holding the lock, and every next run was refused naming a dead PID.

Real sshd, the real CLI in a subprocess, signalled alone (its own session), as when an operator or a CI job's
timeout kills it.
"""

from __future__ import annotations

import signal
import time

import pytest
import yaml

from tests.faults.faultlib import alive, cli, finish, lock_free, wait_until

pytestmark = pytest.mark.ssh

LOCK = ".dflash-provision.lock"


@pytest.mark.parametrize("mode", ["direct", "kept"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_cli_leaves_no_task_process_and_a_free_lock(tmp_path, shared_tmp, ssh_host, sig, mode, request):
    if mode == "kept":
        request.getfixturevalue("kept_connections")
    root, started = shared_tmp / "root", shared_tmp / "started"
    token = f"{int(time.time() * 1000) % 100000}.5"
    host = dict(ssh_host.inventory_vars(), dfp_root=str(root))
    if mode == "direct":
        host["ansible_ssh_common_args"] = "-o ControlPersist=no"
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": host}}}))
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [{"name": "long", "command": {
        "argv": ["sh", "-c", f"setsid sleep 33{token} </dev/null >/dev/null 2>&1 & setsid sleep 30{token} & "
                             f"sleep 31{token} & touch {started}; sleep 32{token}"]}}]}]))

    run = cli(["play", str(book), "-i", str(inv)])
    wait_until("the task's processes to start", lambda: started.exists() and len(alive(token)) >= 5, 60)
    run.send_signal(sig)
    finish(run, 30)
    try:
        wait_until("the task's processes to be stopped", lambda: left(token) == [["sleep", f"33{token}"]], 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; left: {left(token)}") from None
    finally:
        for p in alive(f"sleep 33{token}"):
            p.kill()
    wait_until("the host lock to be let go", lambda: lock_free(root / LOCK), 30)

    quick = tmp_path / "quick.yaml"
    quick.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                      "tasks": [{"name": "quick", "command": {"argv": ["true"]}}]}]))
    again = cli(["play", str(quick), "-i", str(inv), "--lock-wait", "0"])
    out = finish(again, 120)
    assert again.returncode == 0 and "is locked by another run" not in out, out


def left(token: str) -> list[list[str]]:
    return [p.info["cmdline"] for p in alive(token)]
