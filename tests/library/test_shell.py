"""library/shell.py: real shells on real command lines, run by hand (CLI) and through run() with a Context.

What shell shares with command (creates/removes, check mode, stdin, output, failures) is run here through shell
once each; command's own tests go further (test_command.py), and both meet real Ansible in
test_command_against_ansible.py."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from _helpers import alive, load_module, run_by_hand, run_module

from dflash_host.module import ModuleError

shell = load_module("shell")


def call(args: dict, check: bool = False) -> dict:
    return run_module(shell, args, check=check, warnings=True)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("shell", tmp_path, args, *flags, quiet=False)


def test_the_line_runs_in_sh_with_pipes_redirections_and_globs(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    (tmp_path / "b.txt").write_text("y")
    cmd = f"ls {tmp_path}/*.txt | wc -l > {tmp_path}/n; cat {tmp_path}/n && echo err >&2"
    rc, res = cli(tmp_path, {"cmd": cmd})
    assert rc == 0 and res["changed"] is True and res["ran"] is True and not res["failed"]
    assert res["stdout"].strip() == "2" and res["stderr"] == "err" and res["stderr_lines"] == ["err"]
    assert res["cmd"] == cmd  # Ansible's shell returns the string
    assert res["argv"] == ["/bin/sh", "-c", cmd]
    assert res["msg"].startswith("ran shell command ") and res["delta"] and res["start"] and res["end"]


def test_the_shell_expands_variables_from_env_and_the_environment(tmp_path):
    res = call({"cmd": 'echo "$DFP_X" "${HOME:+home}" $((1 + 2))', "env": {"DFP_X": "v"}})
    assert res["stdout"] == "v home 3"


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_executable_chooses_the_shell(tmp_path):
    bash = shutil.which("bash")
    res = call({"cmd": 'echo "${BASH_VERSION:+bash}"; a=(x y); echo "${a[1]}"', "executable": bash})
    assert res["stdout_lines"] == ["bash", "y"] and res["argv"][0] == bash
    assert call({"cmd": 'echo "${BASH_VERSION:+bash}"'})["stdout"] in ("", "bash")  # sh may be bash itself


def test_a_multi_line_script_with_stdin(tmp_path):
    res = call({"cmd": "read first\nread second\necho \"$second-$first\"", "stdin": "one\ntwo"})
    assert res["stdout"] == "two-one"


def test_chdir_and_relative_creates_removes(tmp_path):
    args = {"cmd": "echo built > out.txt", "chdir": str(tmp_path), "creates": "out.txt"}
    assert call(args)["changed"] is True and (tmp_path / "out.txt").read_text() == "built\n"
    res = call(args)
    assert res["changed"] is False and res["rc"] == 0 and res["msg"] == "Did not run command since 'out.txt' exists"
    assert res["stdout"] == "skipped, since out.txt exists" and res["cmd"] == "echo built > out.txt"
    gone = call({"cmd": "rm old", "chdir": str(tmp_path), "removes": "old"})
    assert gone["changed"] is False and gone["msg"] == "Did not run command since 'old' does not exist"


def test_check_mode_does_not_run_unless_check_safe(tmp_path):
    marker = tmp_path / "m"
    rc, res = cli(tmp_path, {"cmd": f"touch {marker}"}, "--check")
    assert rc == 0 and res["skipped"] is True and res["changed"] is False and not marker.exists()
    assert res["msg"].startswith("Command would have run if not in check mode")
    res = call({"cmd": f"touch {marker}", "creates": str(marker)}, check=True)
    assert res["changed"] is True and not marker.exists()
    res = call({"cmd": "echo read | tr a-z A-Z", "check_safe": True}, check=True)
    assert res["ran"] is True and res["stdout"] == "READ"


def test_nonzero_exit_fails_changed_with_the_shells_output(tmp_path):
    rc, res = cli(tmp_path, {"cmd": "echo out; echo 'it broke' >&2; exit 3"})
    assert rc == 1 and res["failed"] is True and res["changed"] is True and res["rc"] == 3
    assert res["msg"].startswith("non-zero return code: shell command \"echo out; echo 'it broke' >&2; exit 3\" exited with rc 3")
    assert res["msg"].endswith("last output lines:\nit broke")
    assert res["stdout"] == "out" and res["stderr"] == "it broke"


def test_a_long_line_is_shortened_in_messages_only(tmp_path):
    cmd = "true " + "x" * 200
    res = call({"cmd": cmd})
    assert res["cmd"] == cmd and len(res["msg"]) < 120 and "...'" in res["msg"]


def test_strip_empty_ends(tmp_path):
    assert call({"cmd": "printf 'a\\n\\n\\n'"})["stdout"] == "a"
    assert call({"cmd": "printf 'a\\n\\n\\n'", "strip_empty_ends": False})["stdout"] == "a\n\n\n"


def test_timeout_stops_the_shell_and_what_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    res = call({"cmd": f"sleep 30 & echo $! > {pidfile}; wait", "timeout_s": 0.5})
    assert res["failed"] is True and "timed out after 0.5 s" in res["msg"] and time.monotonic() - start < 5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


@pytest.mark.parametrize(
    "args, words",
    [
        ({"cmd": "  "}, "cmd is empty"),
        ({"cmd": "true", "executable": ""}, "executable is empty"),
        ({"cmd": "true", "executable": "/nonexistent/bash"}, "not found; install it or give its full path in executable"),
        ({"cmd": "true", "chdir": "/nonexistent-dir"}, "^Unable to change directory before execution"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=words):
        call(args)


@pytest.mark.parametrize(
    "args, words",
    [
        ({}, "missing required argument 'cmd'"),
        ({"cmd": "true", "expand_argument_vars": False},  # Ansible's shell action's words
         "Unsupported parameters for (shell) module: expand_argument_vars"),
        ({"cmd": "true", "argv": ["true"]}, "unknown argument(s) argv"),
    ],
)
def test_the_contract_refuses_what_shell_does_not_take(tmp_path, args, words):
    rc, res = cli(tmp_path, args)
    assert rc == 1 and res["failed"] is True and words in res["msg"]


def test_the_environment_of_the_task_reaches_the_shell(tmp_path, monkeypatch):
    monkeypatch.setenv("DFP_TASK_ENV", "from-environment")  # the worker sets a task's `environment` so
    assert call({"cmd": "echo $DFP_TASK_ENV"})["stdout"] == "from-environment"
    assert os.environ["DFP_TASK_ENV"] == "from-environment"
