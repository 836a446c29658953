"""`python -m dfp_cli.ansible_playbook`, ansible-playbook's command line, and its resident control node: the same
outcome as a run in its own process, the client's environment, folder, umask and streams taken by the run,
signals relayed, a killed client's run ended with its processes, the server's idle end, and the runs it must not
take (a terminal, a folder others can enter). Real processes throughout; each test has its own socket folder
(XDG_RUNTIME_DIR) and ends the servers it started."""

from __future__ import annotations

import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - debug: {msg: "probe={{ lookup('env', 'DFP_PROBE') }}"}
    - copy: {content: "x\\n", dest: "{{ dest }}"}
"""
FAILING = """- hosts: localhost
  gather_facts: false
  tasks:
    - fail: {msg: failed on purpose}
"""
SLEEPING = """- hosts: localhost
  gather_facts: false
  tasks:
    - debug: {msg: asleep}
    - command: sleep {{ seconds }}
"""


@pytest.fixture
def runtime_dir():
    """A socket folder of the test's own (short: a unix socket path has 107 bytes), its servers ended after."""
    path = Path(tempfile.mkdtemp(prefix="dfp-rs-"))
    os.chmod(path, 0o700)
    yield path
    for pidfile in (path / "dflash-provision").glob("resident-*.pid"):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except (ValueError, OSError):
            pass
    shutil.rmtree(path, ignore_errors=True)


def env_for(runtime_dir: Path, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "DFP_"))}
    env.update({"XDG_RUNTIME_DIR": str(runtime_dir), "ANSIBLE_INVENTORY": "/dev/null", "PYTHONPATH": str(ROOT),
                "DFP_RESIDENT": "30", **more})
    return env


def front(args: list[str], env: dict, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dfp_cli.ansible_playbook", *args], env=env, cwd=cwd, text=True,
                          capture_output=True, stdin=subprocess.DEVNULL, timeout=120, **kw)


def server_pids(runtime_dir: Path) -> list[int]:
    return sorted(int(p.read_text()) for p in (runtime_dir / "dflash-provision").glob("resident-*.pid"))


def recap(out: str) -> str:
    return out[out.index("PLAY RECAP"):].split("\n", 2)[1].split(":", 1)[1].split()


def test_resident_run_is_the_run_made_in_its_own_process(runtime_dir, tmp_path):
    """Same output, recap and exit code with and without the server; the second run is served by the first run's
    server; the run has the client's environment, working folder (a relative playbook and dest) and umask."""
    (tmp_path / "play.yml").write_text(PLAY)
    outs = {}
    for resident in ("30", "0"):
        env = env_for(runtime_dir, DFP_PROBE=f"value-{resident}", DFP_RESIDENT=resident)
        dest = f"made-{resident}"
        done = front(["play.yml", "-e", f"dest={dest}"], env, tmp_path, preexec_fn=lambda: os.umask(0o077))
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"probe=value-{resident}" in done.stdout
        assert (tmp_path / dest).read_text() == "x\n"
        assert (tmp_path / dest).stat().st_mode & 0o777 == 0o600  # the client's umask, not the server's
        outs[resident] = recap(done.stdout)
        if resident == "30":
            first = server_pids(runtime_dir)
            assert len(first) == 1, "the first run started one server"
            again = front(["play.yml", "-e", f"dest={dest}"], env, tmp_path)
            assert again.returncode == 0 and recap(again.stdout)[1] == "changed=0", again.stdout + again.stderr
            assert server_pids(runtime_dir) == first, "the second run was served by the same server"
    assert outs["30"] == outs["0"]


def test_exit_codes_and_refusals_as_in_its_own_process(runtime_dir, tmp_path):
    (tmp_path / "fail.yml").write_text(FAILING)
    (tmp_path / "broken.yml").write_text("- hosts: localhost\n  tasks: {not: a list}\n")
    cases = [(["fail.yml"], 2), (["broken.yml"], 4), (["fail.yml", "--no-such-flag"], 4), (["missing.yml"], 4)]
    for args, code in cases:
        results = [front(args, env_for(runtime_dir, DFP_RESIDENT=r), tmp_path) for r in ("30", "0")]
        assert [r.returncode for r in results] == [code, code], [r.stderr for r in results]
        assert results[0].stderr.strip().splitlines()[-1:] == results[1].stderr.strip().splitlines()[-1:]
    assert server_pids(runtime_dir), "the resident runs were served"


def _start_sleeping(runtime_dir: Path, tmp_path: Path, seconds: str) -> subprocess.Popen:
    """A run whose command sleeps `seconds` (a number no other test's command sleeps), once that command runs."""
    (tmp_path / "sleep.yml").write_text(SLEEPING)
    proc = subprocess.Popen([sys.executable, "-m", "dfp_cli.ansible_playbook", "sleep.yml", "-e", f"seconds={seconds}"],
                            env=env_for(runtime_dir), cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not _sleepers(seconds):
        assert time.monotonic() < deadline and proc.poll() is None, "the run's command never started"
        time.sleep(0.05)
    return proc


def _sleepers(seconds: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if (p.info["cmdline"] or [])[:2] == ["sleep", seconds]:
            found.append(p)
    return found


def _run_children(runtime_dir: Path) -> list[psutil.Process]:
    return [c for pid in server_pids(runtime_dir) for c in psutil.Process(pid).children()]


def _gone(what, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not what():
            return True
        time.sleep(0.1)
    return False


def test_killed_client_ends_its_run_and_the_runs_processes(runtime_dir, tmp_path):
    """kill -9 of the client (a controller that died): the run's child ends, its worker stops the task's process,
    and the host lock is free for the next run."""
    proc = _start_sleeping(runtime_dir, tmp_path, "61.1")
    assert _run_children(runtime_dir), "the run is the server's child"
    proc.kill()
    proc.wait(timeout=10)
    assert _gone(lambda: _run_children(runtime_dir)), "the run outlived its client"
    assert _gone(lambda: _sleepers("61.1")), "the run's command outlived its client"
    (tmp_path / "fail.yml").write_text(FAILING)
    done = front(["fail.yml"], env_for(runtime_dir), tmp_path)
    assert done.returncode == 2 and "another run" not in done.stdout + done.stderr


def test_signals_reach_the_run(runtime_dir, tmp_path):
    """SIGTERM to the client ends the run as it ends a process of its own (143, the command stopped); SIGINT
    interrupts it as Ctrl-C does a run in its own process (130, once the running task has ended)."""
    for seconds, signum, code in (("61.2", signal.SIGTERM, 128 + signal.SIGTERM), ("2.3", signal.SIGINT, 130)):
        proc = _start_sleeping(runtime_dir, tmp_path, seconds)
        try:
            proc.send_signal(signum)
            out, _ = proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert proc.returncode == code, out
        assert _gone(lambda s=seconds: _sleepers(s)), "the run's command outlived the signal"
    assert "interrupted (Ctrl-C)" in out


def test_server_ends_after_its_idle_time(runtime_dir, tmp_path):
    (tmp_path / "fail.yml").write_text(FAILING)
    assert front(["fail.yml"], env_for(runtime_dir, DFP_RESIDENT="1"), tmp_path).returncode == 2
    pids = server_pids(runtime_dir)
    assert pids
    assert _gone(lambda: psutil.pid_exists(pids[0]), within_s=10), "the server outlived DFP_RESIDENT"
    assert not list((runtime_dir / "dflash-provision").glob("resident-*.sock"))


def test_terminal_runs_and_open_folders_are_not_served(runtime_dir, tmp_path):
    """A run with a terminal on stdin (a password may be asked) or -K is made in its own process; a socket folder
    others can enter is not used (warned), and the run is still made."""
    (tmp_path / "fail.yml").write_text(FAILING)
    main, other = pty.openpty()
    done = subprocess.run([sys.executable, "-m", "dfp_cli.ansible_playbook", "fail.yml"], env=env_for(runtime_dir),
                          cwd=tmp_path, stdin=other, capture_output=True, text=True, timeout=120)
    os.close(main)
    os.close(other)
    assert done.returncode == 2
    assert not server_pids(runtime_dir)
    folder = runtime_dir / "dflash-provision"
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)
    done = front(["fail.yml"], env_for(runtime_dir), tmp_path)
    assert done.returncode == 2
    assert "not a private folder" in done.stderr and not server_pids(runtime_dir)


def test_key_separates_what_a_start_reads():
    """A server serves only runs whose start-time environment matches its own (the locale, the cache folder)."""
    code = "from dfp_cli.ansible_playbook import wire; print(wire.key())"
    keys = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT), **extra},
                           capture_output=True, text=True, check=True).stdout for extra in
            ({"LC_ALL": "C.UTF-8"}, {"LC_ALL": "en_US.UTF-8"}, {"LC_ALL": "C.UTF-8", "XDG_CACHE_HOME": "/tmp/x"})}
    assert len(keys) == 3


NESTED = """- hosts: localhost
  gather_facts: false
  tasks:
    - command: "{{ python }} -m dfp_cli.ansible_playbook inner.yml --lock-wait 3"
      args: {chdir: "{{ folder }}"}
      register: inner
    - assert: {that: ["'inner-ran' in inner.stdout"]}
"""
INNER = """- hosts: localhost
  gather_facts: false
  tasks:
    - command: echo inner-ran
      register: said
    - debug: {msg: "{{ said.stdout }}"}
"""


def test_a_run_started_by_a_task_of_the_lock_holder_is_let_in(runtime_dir, tmp_path):
    """ansible-playbook in a command task on the same host (ansible-core's copy target does it): the inner run
    is let in by the outer run's hold of the host lock, through the resident control node too (the worker finds
    the holder among the ancestors of the run's client, not of the server), and in its own process."""
    (tmp_path / "outer.yml").write_text(NESTED)
    (tmp_path / "inner.yml").write_text(INNER)
    for resident in ("30", "0"):
        done = front(["outer.yml", "-e", f"python={sys.executable}", "-e", f"folder={tmp_path}"],
                     env_for(runtime_dir, DFP_RESIDENT=resident), tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
    assert server_pids(runtime_dir)


def test_a_run_the_client_gave_up_on_never_happens(runtime_dir, tmp_path):
    """A client that stops waiting before it says `go` (it then makes the run in its own process) leaves a child
    that ends without running anything: the run happens once. Driven over the real socket with the wire format."""
    from dfp_cli.ansible_playbook import child, client, wire

    (tmp_path / "fail.yml").write_text(FAILING)
    env = env_for(runtime_dir)
    assert front(["fail.yml"], env, tmp_path).returncode == 2  # a server of this key now listens
    (tmp_path / "touch.yml").write_text(PLAY)
    code = ("import os, sys; from dfp_cli.ansible_playbook import wire; from engine.connection.user_socket import "
            "socket_folder; print(wire.paths(socket_folder(), wire.key())['socket'])")
    path = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()
    sock = client.connect(path)
    wire.send_request(sock, ["touch.yml", "-e", f"dest={tmp_path / 'made'}"], str(tmp_path), env, 0o022)
    word, pid = wire.Lines(sock).next()
    assert word == "started"
    try:  # no `go`, the connection kept open past the child's wait for it
        assert _gone(lambda: psutil.pid_exists(int(pid)) and psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE,
                     within_s=child.GO_S + 5)
        assert not (tmp_path / "made").exists(), "the child ran the playbook its client gave up on"
    finally:
        sock.close()


def test_a_new_server_removes_what_ended_servers_of_other_keys_left(runtime_dir, tmp_path):
    """Each code version is a key of its own: a server that starts removes the lock, log, pidfile and socket of
    keys whose server has ended (their lock is free), and nothing of a key whose server still serves, nor a file
    not named as a server's."""
    (tmp_path / "fail.yml").write_text(FAILING)
    assert front(["fail.yml"], env_for(runtime_dir, DFP_RESIDENT="30"), tmp_path).returncode == 2
    folder = runtime_dir / "dflash-provision"
    live = sorted(p.name for p in folder.iterdir())
    dead = [folder / f"resident-0123456789abcdef{ext}" for ext in (".lock", ".log", ".pid")]
    strangers = [folder / "resident-0123456789abcdeX.lock", folder / "notes.txt"]
    for path in dead + strangers:
        path.write_text("x")
    assert front(["fail.yml"], env_for(runtime_dir, DFP_RESIDENT="31"), tmp_path).returncode == 2  # another key
    assert len(server_pids(runtime_dir)) == 2
    left = {p.name for p in folder.iterdir()}
    assert set(live) <= left, "a serving server's files were removed"
    assert not any(p.name in left for p in dead), "an ended server's files were left"
    assert all(p.name in left for p in strangers), "a file not named as a server's was removed"
