"""library/daemon.py with real processes: a Python http.server started, left alone, restarted on a new argv or
checksum, reloaded (SIGHUP), stopped; a start that fails quotes the log; a pidfile whose PID now belongs to another
process (reused: another start time) is never signalled."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from _helpers import load_module, run_module

from dflash_host.host.processes import alive
from dflash_host.module import ModuleError
from tests.library.test_wait_for import free_port

daemon = load_module("daemon")

# A server that also writes a line on SIGHUP, so a reload is visible in its log.
SERVER = ("import http.server, signal, sys\n"
          "signal.signal(signal.SIGHUP, lambda *a: print('reloaded', flush=True))\n"
          "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), http.server.SimpleHTTPRequestHandler)"
          ".serve_forever()\n")


@pytest.fixture
def served(tmp_path):
    """(args for an http.server daemon on a free port, the port); whatever it started is stopped after."""
    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    args = {"name": "web", "argv": [sys.executable, str(script), str(port)], "port": port,
            "root": str(tmp_path / "root"), "stop_timeout_s": 5.0}
    yield args, port
    run_module(daemon, {**args, "state": "stopped"})


def answers(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
        return resp.status == 200


def gone(pid: int) -> bool:
    """Exited (a zombie this test process has not reaped counts: it runs nothing)."""
    try:
        return not alive(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return True


def test_started_once_then_left_alone_then_restarted_on_a_new_checksum(served, tmp_path):
    args, port = served
    first = run_module(daemon, args)
    assert first["changed"] and answers(port)
    record = json.loads((tmp_path / "root" / "run" / "web.pid").read_text())
    assert record["pid"] == first["pid"] and record["cmdline"] == args["argv"]
    again = run_module(daemon, args)
    assert not again["changed"] and again["pid"] == first["pid"]
    moved = run_module(daemon, {**args, "checksum": "new config"})
    assert moved["changed"] and moved["pid"] != first["pid"] and gone(first["pid"]) and answers(port)
    assert not run_module(daemon, {**args, "checksum": "new config"})["changed"]


def test_reloaded_sends_sighup_to_the_same_process(served, tmp_path):
    args, port = served
    pid = run_module(daemon, args)["pid"]
    out = run_module(daemon, {**args, "state": "reloaded"})
    assert out["changed"] and out["pid"] == pid
    log = tmp_path / "root" / "logs" / "web.log"
    deadline = time.monotonic() + 10
    while "reloaded" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "reloaded" in log.read_text() and answers(port)


def test_stopped_stops_it_and_forgets_the_pidfile_then_is_ok(served, tmp_path):
    args, port = served
    pid = run_module(daemon, args)["pid"]
    out = run_module(daemon, {**args, "state": "stopped"})
    assert out["changed"] and gone(pid)
    assert not (tmp_path / "root" / "run" / "web.pid").exists()
    assert not run_module(daemon, {**args, "state": "stopped"})["changed"]


def test_a_reused_pid_is_never_signalled(served, tmp_path):
    """The pidfile names a live process that is not the one recorded (its start time differs): a PID reused."""
    args, port = served
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        run_dir = tmp_path / "root" / "run"
        run_dir.mkdir(parents=True)
        (run_dir / "web.pid").write_text(json.dumps({"pid": stranger.pid, "start_time": 1000.0, "cmdline": ["sleep", "60"]}))
        stopped = run_module(daemon, {**args, "state": "stopped"}, warnings=True)
        assert not stopped["changed"] and stranger.poll() is None, stopped
        assert f"PID {stranger.pid} of the pidfile is not the daemon" in stopped["warnings"][0]
        (run_dir / "web.pid").write_text(json.dumps({"pid": stranger.pid, "start_time": 1000.0, "cmdline": ["sleep", "60"]}))
        started = run_module(daemon, args)
        assert started["changed"] and started["pid"] != stranger.pid and stranger.poll() is None and answers(port)
    finally:
        stranger.send_signal(signal.SIGKILL)
        stranger.wait()


def test_a_program_that_exits_or_never_answers_fails_quoting_its_log(tmp_path):
    root = str(tmp_path / "root")
    with pytest.raises(ModuleError, match=r"bad exited with status 3 while starting; its log .*boom"):
        run_module(daemon, {"name": "bad", "argv": [sys.executable, "-c", "import sys, time; print('boom', flush=True);"
                                                    " time.sleep(0.3); sys.exit(3)"], "port": free_port(), "root": root})
    with pytest.raises(ModuleError, match=r"mute did not answer on 127.0.0.1:\d+ within 1 s \(it was stopped\)"):
        run_module(daemon, {"name": "mute", "argv": ["sleep", "60"], "port": free_port(), "root": root,
                            "start_timeout_s": 1.0})
    assert not (tmp_path / "root" / "run" / "mute.pid").exists()
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    try:  # another program answers on the port: not proof that ours started
        with pytest.raises(ModuleError, match=r"sleeper did not answer on 127.0.0.1:\d+ within 1 s"):
            run_module(daemon, {"name": "sleeper", "argv": ["sleep", "60"], "port": held.getsockname()[1], "root": root,
                                "start_timeout_s": 1.0})
    finally:
        held.close()
    with pytest.raises(ModuleError, match="is not a plain name"):
        run_module(daemon, {"name": "../x", "argv": ["true"], "root": root})
