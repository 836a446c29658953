"""ControlPersist (engine/connection/persist.py, engine/connection/persist_daemon.py): by default (60 s, as Ansible's ssh_args) or with
`-o ControlMaster=auto -o ControlPersist=N` a run leaves the host's connection and an idle worker to a daemon, and
the next run uses them: no login and no python start on the host. Real sshd, real daemon; the worker is seen from the host (the PID of the process that
runs a task's command is the worker's)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil
import pytest
import yaml

from engine.connection import persist
from engine.connection.client import WorkerClient
from engine.inventory.manager import Host
from tests.helpers import daemon_pid as _daemon_pid
from tests.helpers import play
from tests.helpers import wait_gone as _wait_gone
from tests.sshd_harness import TEST_USER, run_as_user

pytestmark = pytest.mark.ssh

BOOK = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Who runs me\n      command: {argv: [sh, -c, 'echo $PPID']}\n")
KEEP = "-o ControlMaster=auto -o ControlPersist={}"


def _inventory(tmp_path: Path, h, persist_value: str | None, name: str = "inventory.yaml") -> Path:
    """persist_value: ControlPersist's value; None: turned off (-o ControlPersist=no); "default": no ssh option."""
    host = dict(h.inventory_vars())
    if persist_value != "default":
        host["ansible_ssh_common_args"] = KEEP.format(persist_value or "no")
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


def test_by_default_the_connection_is_kept_as_with_ansibles_ssh_args(tmp_path, ssh_hosts, kept_connections):
    inv = _inventory(tmp_path, ssh_hosts[0], "default")
    first = _worker_pid(play(BOOK, inv, tmp_path))
    assert _worker_pid(play(BOOK, inv, tmp_path)) == first
    assert (kept_connections / f"{persist.code_key()}.sock").exists()


def test_where_only_the_default_keeps_an_unusable_socket_folder_means_a_direct_run(tmp_path, ssh_hosts,
                                                                                 kept_connections):
    """The folder others could enter: an explicit ControlPersist is refused (below), the default is dropped; the
    run connects on its own and puts nothing in that folder."""
    kept_connections.mkdir(mode=0o755)
    os.chmod(kept_connections, 0o755)
    inv = _inventory(tmp_path, ssh_hosts[0], "default")
    first = _worker_pid(play(BOOK, inv, tmp_path))
    assert _worker_pid(play(BOOK, inv, tmp_path)) != first
    assert not list(kept_connections.iterdir())


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


def test_a_run_that_dies_mid_task_leaves_no_worker_and_frees_the_lock(tmp_path, ssh_hosts, kept_connections):
    """The client closes while its task still runs on the host (a killed run): the daemon does not keep that
    worker; once the task ends the worker exits, and the next run takes the host lock."""
    inv = _inventory(tmp_path, ssh_hosts[0], "60")
    host = Host("h", yaml.safe_load(inv.read_text())["all"]["hosts"]["h"])
    client = WorkerClient.open(host)
    assert client.lock("~/.dfp-test-lock", 0, {"run_id": "dying"})["locked"]
    pid = client.run("command", {"argv": ["sh", "-c", "echo $PPID"]}, check=False, diff=False)["stdout"]
    client.transport._write(b'{"op": "run", "module": "command", "args": {"argv": ["sleep", "1"]}, "id": 99}\n')
    client.transport.close()
    assert _wait_gone(int(pid))
    again = WorkerClient.open(host)
    try:
        assert not again.transport.reused
        assert again.lock("~/.dfp-test-lock", 5, {"run_id": "next"})["locked"]
    finally:
        again.close()


def test_a_worker_that_cannot_start_says_why(tmp_path, ssh_hosts, kept_connections):
    inv = tmp_path / "inventory.yaml"
    host = dict(ssh_hosts[0].inventory_vars(), ansible_ssh_common_args=KEEP.format(60),
                ansible_python_interpreter="/nonexistent/python3")
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": host}}}))
    res = play(BOOK, inv, tmp_path)
    assert res.exit_code == 3
    [row] = res.tasks
    assert "/nonexistent/python3" in row["msg"] and "not found" in row["msg"], row["msg"]


def test_relative_key_paths_are_the_runs_own_folder(tmp_path, ssh_hosts, kept_connections, monkeypatch):
    """The daemon runs in another folder: a key given relative to the run's folder still works."""
    key = Path(ssh_hosts[0].key)
    monkeypatch.chdir(key.parent)
    host = dict(ssh_hosts[0].inventory_vars(), ansible_ssh_private_key_file=key.name,
                ansible_ssh_common_args=KEEP.format(60))
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": host}}}))
    assert _worker_pid(play(BOOK, inv, tmp_path)) == _worker_pid(play(BOOK, inv, tmp_path))


def test_a_socket_answered_by_another_user_is_refused_and_nothing_is_sent(tmp_path, ssh_hosts, kept_connections):
    """A listening socket of another user's put where the daemon's belongs (a folder another user could rename):
    the run refuses to talk through it."""
    other = Path(tempfile.mkdtemp(prefix="dfp-other-", dir="/tmp"))
    os.chown(other, pwd.getpwnam(TEST_USER).pw_uid, -1)
    planted = other / "s"
    listener = run_as_user(["/usr/bin/python3", "-c", PLANTED, str(planted)], stdout=subprocess.PIPE)
    try:
        assert listener.stdout.readline().strip() == b"listening"
        os.rename(planted, persist.socket_path())
        res = play(BOOK, _inventory(tmp_path, ssh_hosts[0], "60"), tmp_path)
        assert res.exit_code == 3
        [row] = res.tasks
        assert f"answered by uid {pwd.getpwnam(TEST_USER).pw_uid}, not by you" in row["msg"], row["msg"]
        with pytest.raises(subprocess.TimeoutExpired):  # it never got a word: it exits (code 7) on the first byte
            listener.wait(timeout=0.5)
    finally:
        listener.kill()
        persist.socket_path().unlink(missing_ok=True)
        shutil.rmtree(other, ignore_errors=True)


# Listens at argv[1]; exits 7 when a client sends anything.
PLANTED = """
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(5)
    try:
        if c.recv(10):
            sys.exit(7)
    except OSError:
        pass
"""


def test_runs_right_after_disconnect_succeed_and_the_old_daemon_ends(tmp_path, ssh_hosts, kept_connections):
    """`invoke disconnect`, then runs at once: the old daemon stops listening and lets go of its key before it
    ends, so the runs reach it while it ends or a new one; none fails."""
    inv = _inventory(tmp_path, ssh_hosts[0], "60")
    first = _worker_pid(play(BOOK, inv, tmp_path))
    old = _daemon_pid(kept_connections)
    for _ in range(3):
        assert persist.stop()
        assert _worker_pid(play(BOOK, inv, tmp_path)) != first
    assert old and _wait_gone(old)
    new = _daemon_pid(kept_connections)
    assert new and new != old and psutil.pid_exists(new)


def test_a_run_with_another_ssh_agent_meets_another_daemon(monkeypatch):
    """The daemon logs in with the agent of the run that started it: a run with another agent (another login's
    SSH_AUTH_SOCK) must not be handed connections made with the first one's keys, nor fail on its dead socket."""
    keys = []
    for agent in ("/tmp/agent-a/agent.1", "/tmp/agent-b/agent.2", "/tmp/agent-a/agent.1"):
        monkeypatch.setenv("SSH_AUTH_SOCK", agent)
        persist.code_key.cache_clear()
        keys.append(persist.code_key())
    persist.code_key.cache_clear()
    assert keys[0] != keys[1] and keys[0] == keys[2]


def test_a_kept_worker_that_does_not_answer_is_left_and_its_connection_retired(tmp_path, ssh_hosts, kept_connections):
    """A real hang (the idle worker SIGSTOPped on the host): the next run's ping gets no answer, so that worker is
    closed, its connection retired and the run goes on through a new connection and worker; once the hung one
    runs again it sees its channel closed and exits, and the run after uses the new worker."""
    import signal

    inv = _inventory(tmp_path, ssh_hosts[0], "60")
    hung = _worker_pid(play(BOOK, inv, tmp_path))
    os.kill(hung, signal.SIGSTOP)
    try:
        fresh = _worker_pid(play(BOOK, inv, tmp_path))
    finally:
        os.kill(hung, signal.SIGCONT)
    assert fresh != hung
    assert _wait_gone(hung)
    assert _worker_pid(play(BOOK, inv, tmp_path)) == fresh


RESET_BOOK = ("- hosts: all\n  gather_facts: false\n  tasks:\n"
              "    - name: Before\n      command: {argv: [sh, -c, 'echo $PPID $SSH_CONNECTION']}\n"
              "    - meta: reset_connection\n"
              "    - name: After\n      command: {argv: [sh, -c, 'echo $PPID $SSH_CONNECTION']}\n")


def _login(res, task: str) -> tuple[str, str]:
    """(the worker's PID, the login's client port) of a task's run: a new SSH login has a new source port."""
    assert res.exit_code == 0, [(t["task"], t["msg"]) for t in res.tasks]
    pid, _ip, port, *_ = res.find(task, "h")[0].result["stdout"].split()
    return pid, port


def test_reset_connection_logs_in_anew_and_the_new_login_is_the_one_kept(tmp_path, ssh_hosts, kept_connections):
    """What a play that just added the login user to a group needs: the tasks after `meta: reset_connection`, and
    the next run, go over a new SSH login (not only a new worker on the kept connection)."""
    inv = _inventory(tmp_path, ssh_hosts[0], "default")
    kept = play(RESET_BOOK.replace("    - meta: reset_connection\n", ""), inv, tmp_path)
    assert _login(kept, "Before") == _login(kept, "After")  # without it: one login, one worker
    res = play(RESET_BOOK, inv, tmp_path)
    before, after = _login(res, "Before"), _login(res, "After")
    assert before[0] != after[0] and before[1] != after[1], (before, after)
    assert not psutil.pid_exists(int(before[0])) or _wait_gone(int(before[0]))
    again = play(RESET_BOOK.replace("    - meta: reset_connection\n", ""), inv, tmp_path)
    assert _login(again, "Before") == after  # the new login is kept for the next run
