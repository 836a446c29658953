"""The CLI ends without Python's teardown once its command line's tasks have run (dfp_cli/fast_exit.py): what a
normal exit does that matters still happens (every task of the line, exit codes and messages, atexit handlers, the
threads left, output through a pipe complete), and an Executor used in-process returns as Invoke's does. Real
processes."""

from __future__ import annotations

import subprocess
import sys

import yaml
from invoke import Collection, Config, Task

from dfp_cli.fast_exit import FastExitExecutor
from tests.cli.helpers import ROOT, invoke

LOCAL = {"all": {"hosts": {"local": {"ansible_connection": "local"}}}}


def _book(tmp_path, name: str, msg: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                     "tasks": [{"name": name, "debug": {"msg": msg}}]}], sort_keys=False))
    return str(path)


def test_every_task_of_the_command_line_runs_and_a_long_output_arrives_whole_through_a_pipe(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(LOCAL))
    long = "x" * 200_000  # far past a pipe's buffer: what is still buffered at the end must be written
    code, out = invoke("play", _book(tmp_path, "first", long), "-i", str(inv),
                       "play", _book(tmp_path, "second", "end"), "-i", str(inv))
    assert code == 0, out[-2000:]
    assert long in out and out.index("first") < out.index("second")
    assert out.count("PLAY RECAP") == 2 and out.rstrip().endswith("s"), out[-500:]  # to the second recap's time


def test_a_failed_run_keeps_its_exit_code_and_a_refusal_its_message(tmp_path):
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(LOCAL))
    fails = tmp_path / "fails.yaml"
    fails.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [{"fail": {"msg": "no"}}]}]))
    assert invoke("play", str(fails), "-i", str(inv))[0] == 2
    code, out = invoke("play", str(tmp_path / "missing.yaml"), "-i", str(inv))
    assert code == 4 and "missing.yaml" in out and "not found" in out, out


def test_exit_now_runs_the_atexit_handlers_after_the_threads_left_and_flushes_the_streams():
    script = ("import atexit, sys, threading, time\n"
              "from dfp_cli.fast_exit import exit_now\n"
              "atexit.register(lambda: print('atexit ran'))\n"
              "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
              "print('buffered', end='')\n"
              "sys.stderr.write('err')\n"
              "exit_now(3)\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3
    assert proc.stdout == "bufferedthread done\natexit ran\n" and proc.stderr == "err"


def test_in_process_the_executor_returns_as_invokes_does():
    ran = []
    coll = Collection(Task(lambda c: ran.append("yes") or "result", name="one"))
    results = FastExitExecutor(coll, Config()).execute("one")
    assert ran == ["yes"] and list(results.values()) == ["result"]
