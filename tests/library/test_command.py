"""library/command.py: real programs, run by hand (CLI) and through run() with a Context.

The decisions it shares with shell (argv, cmd's split, expansion, creates/removes) are unit-tested in
tests/dflash_host/host/test_commands.py; the same inputs against real ansible-core in test_command_against_ansible.py."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from _helpers import alive, load_module, run_by_hand, run_module

from dflash_host.host import commands
from dflash_host.module import ModuleError

command = load_module("command")

ANSIBLE_FIELDS = {"cmd", "rc", "stdout", "stderr", "stdout_lines", "stderr_lines", "start", "end", "delta", "changed",
                  "msg"}
START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}$")
DELTA = re.compile(r"^\d+:\d\d:\d\d\.\d{6}$")


def call(args: dict, check: bool = False, diff: bool = False) -> dict:
    return run_module(command, args, check=check, diff=diff, warnings=True)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("command", tmp_path, args, *flags, quiet=False)


PY = sys.executable


# ---------------------------------------------------------------- argv and cmd


def test_cli_runs_the_program_and_reports_rc_stdout_duration(tmp_path):
    rc, res = cli(tmp_path, {"argv": [PY, "-c", "print('hello')"]})
    assert rc == 0
    assert res["rc"] == 0 and res["stdout"] == "hello" and res["changed"] is True and res["ran"] is True
    assert res["duration_s"] >= 0 and not res["failed"]


def test_the_result_has_ansibles_fields_and_ours(tmp_path):
    res = call({"argv": [PY, "-c", "import sys; print('a'); print('b'); print('e', file=sys.stderr)"]})
    assert ANSIBLE_FIELDS | {"argv", "ran", "duration_s"} <= set(res)
    assert res["cmd"] == res["argv"] == [PY, "-c", "import sys; print('a'); print('b'); print('e', file=sys.stderr)"]
    assert res["stdout"] == "a\nb" and res["stdout_lines"] == ["a", "b"]
    assert res["stderr"] == "e" and res["stderr_lines"] == ["e"]
    assert START.match(res["start"]) and START.match(res["end"]) and res["start"] <= res["end"]
    assert DELTA.match(res["delta"])


def test_cmd_is_split_into_arguments_and_no_shell_runs_it(tmp_path):
    res = call({"cmd": f"""{PY} -c "import sys; print(sys.argv[1:])" 'a b' c\\ d "e|f;g" '$(id)' > out"""})
    assert res["stdout"] == "['a b', 'c d', 'e|f;g', '$(id)', '>', 'out']"
    assert res["cmd"] == [PY, "-c", "import sys; print(sys.argv[1:])", "a b", "c d", "e|f;g", "$(id)", ">", "out"]


def test_the_one_line_form_of_a_playbook_reaches_cmd(tmp_path):
    """`- command: ls creates=/x` gives cmd (engine/playbook/tasks.py's free form) and the options after it."""
    from engine.playbook.tasks import free_form_args

    marker = tmp_path / "m"
    args = free_form_args(f"touch {marker} creates={marker}")
    assert call(args)["changed"] is True and marker.exists()
    assert call(args)["msg"] == f"Did not run command since '{marker}' exists"


@pytest.mark.parametrize(
    "args, words",
    [
        ({"cmd": "ls", "argv": ["ls"]}, r"parameters are mutually exclusive: _raw_params\|cmd\|argv\. .*exactly one of 'cmd' and 'argv'"),
        ({}, "one of the following is required: _raw_params, cmd, argv. .*exactly one of 'cmd' and 'argv'"),
        ({"cmd": "echo 'open"}, "No closing quotation"),
        ({"cmd": " "}, "cmd is empty"),
    ],
)
def test_cmd_and_argv_are_one_or_the_other(args, words):
    with pytest.raises(ModuleError, match=words):
        call(args)


def test_a_missing_cmd_or_argv_is_one_clear_paragraph_by_hand(tmp_path):
    rc, res = cli(tmp_path, {"chdir": str(tmp_path)})
    assert rc == 1 and res["failed"] is True
    assert "give exactly one of 'cmd' and 'argv'" in res["msg"] and "shell module" in res["msg"] and "\n" not in res["msg"]


def test_cli_string_argv_fails_with_a_list_hint(tmp_path):
    rc, res = cli(tmp_path, {"argv": "rm -rf /tmp/x"})
    assert rc == 1 and res["failed"] is True and "give a list instead" in res["msg"]


def test_arguments_are_expanded_from_the_environment_as_ansible_does(tmp_path):
    prog = [PY, "-c", "import sys; print(sys.argv[1:])"]
    words = ["$DFP_X", "${DFP_X}/y", "~", "$DFP_UNSET_Z"]
    res = call({"argv": [*prog, *words], "env": {"DFP_X": "v"}, "expand_argument_vars": True})
    assert res["stdout"] == repr(["v", "v/y", os.path.expanduser("~"), "$DFP_UNSET_Z"])
    assert res["cmd"] == [*prog, *words]  # Ansible's cmd: before expansion
    assert res["argv"][3] == "v"  # what ran
    line = call({"cmd": f"{PY} -c 'import sys; print(sys.argv[1:])' $DFP_X ~", "env": {"DFP_X": "v"}})
    assert line["stdout"] == repr(["v", os.path.expanduser("~")])  # a cmd line is expanded by default, as Ansible's
    literal = call({"cmd": f"{PY} -c 'import sys; print(sys.argv[1:])' $DFP_X ~", "env": {"DFP_X": "v"},
                    "expand_argument_vars": False})
    assert literal["stdout"] == repr(["$DFP_X", "~"])


def test_an_argv_list_is_literal_unless_asked(tmp_path):
    """A difference from Ansible on purpose: an argv item (a value a host returned, a sh -c script) reaches the
    program as written unless the task says expand_argument_vars: true."""
    prog = [PY, "-c", "import sys; print(sys.argv[1:])"]
    res = call({"argv": [*prog, "$DFP_X", "~"], "env": {"DFP_X": "v"}})
    assert res["stdout"] == repr(["$DFP_X", "~"])
    script = call({"argv": ["sh", "-c", 'echo "[$DFP_X]"'], "env": {"DFP_X": "a; echo injected"}})
    assert script["stdout"] == "[a; echo injected]"  # the script's shell expanded it as data, nothing ran


def test_executable_is_not_used_and_warned_about_in_ansibles_words(tmp_path):
    res = call({"cmd": "echo $0", "executable": "/bin/bash", "expand_argument_vars": False})
    assert res["stdout"] == "$0"  # no shell ran it
    assert res["warnings"] == ["As of Ansible 2.4, the parameter 'executable' is no longer supported with the "
                               "'command' module. Not using '/bin/bash'."]


# ---------------------------------------------------------------- creates / removes


def test_creates_makes_the_second_run_report_no_change(tmp_path):
    marker = tmp_path / "built"
    args = {"argv": ["touch", str(marker)], "creates": str(marker)}
    first = call(args)
    assert first["changed"] is True and marker.exists()
    second = call(args)
    assert second["changed"] is False and second["ran"] is False and second["rc"] == 0
    assert second["msg"] == f"Did not run command since '{marker}' exists"
    assert second["stdout"] == f"skipped, since {marker} exists" and second["stdout_lines"] == [second["stdout"]]
    assert second["start"] is None and second["end"] is None and second["delta"] is None
    assert second["cmd"] == ["touch", str(marker)]


def test_removes_skips_when_the_path_is_absent(tmp_path):
    target = tmp_path / "old"
    target.write_text("x")
    args = {"argv": ["rm", str(target)], "removes": str(target)}
    assert call(args)["changed"] is True and not target.exists()
    res = call(args)
    assert res["changed"] is False and res["rc"] == 0
    assert res["msg"] == f"Did not run command since '{target}' does not exist"
    assert res["stdout"] == f"skipped, since {target} does not exist"


def test_creates_takes_a_glob_pattern(tmp_path):
    (tmp_path / "dist").mkdir()
    args = {"cmd": "touch dist/pkg-1.0.whl", "chdir": str(tmp_path), "creates": "dist/*.whl"}
    assert call(args)["changed"] is True
    assert call(args)["msg"] == "Did not run command since 'dist/*.whl' exists"


def test_relative_creates_is_taken_from_chdir(tmp_path):
    (tmp_path / "out.txt").write_text("done")
    res = call({"argv": ["false"], "chdir": str(tmp_path), "creates": "out.txt"})
    assert res["changed"] is False and res["ran"] is False


# ---------------------------------------------------------------- check mode


def test_check_mode_does_not_run_and_is_skipped_without_creates_or_removes(tmp_path):
    marker = tmp_path / "m"
    rc, res = cli(tmp_path, {"argv": ["touch", str(marker)]}, "--check")
    assert rc == 0 and res["skipped"] is True and res["changed"] is False
    assert res["msg"].startswith("Command would have run if not in check mode") and "check_safe" in res["msg"]
    assert not marker.exists()
    assert res["rc"] == 0 and res["stdout"] == "" and res["ran"] is False  # registered keys stay defined


def test_check_mode_with_creates_says_changed_or_ansibles_would_not(tmp_path):
    marker = tmp_path / "m"
    res = call({"argv": ["touch", str(marker)], "creates": str(marker)}, check=True)
    assert res["changed"] is True and "skipped" not in res and not marker.exists()
    marker.write_text("")
    res = call({"argv": ["touch", str(marker)], "creates": str(marker)}, check=True)
    assert res["changed"] is False and res["msg"] == f"Would not run command since '{marker}' exists"


def test_check_safe_command_runs_in_check_mode(tmp_path):
    res = call({"argv": ["echo", "read-only"], "check_safe": True}, check=True)
    assert res["ran"] is True and res["stdout"] == "read-only"


# ---------------------------------------------------------------- environment, stdin, chdir, output


def test_env_is_added_to_the_inherited_environment(tmp_path):
    res = call(
        {
            "argv": [PY, "-c", "import os; print(os.environ['DFP_X'], 'PATH' in os.environ)"],
            "env": {"DFP_X": 42},
        }
    )
    assert res["stdout"] == "42 True"


def test_stdin_is_fed_with_a_newline_and_otherwise_empty(tmp_path):
    prog = [PY, "-c", "import sys; print(repr(sys.stdin.read()))"]
    assert call({"argv": prog, "stdin": "abc"})["stdout"] == "'abc\\n'"
    assert call({"argv": prog, "stdin": "abc\n"})["stdout"] == "'abc\\n\\n'"  # as Ansible: always added
    assert call({"argv": prog, "stdin": "abc", "stdin_add_newline": False})["stdout"] == "'abc'"
    assert call({"argv": prog, "stdin": ""})["stdout"] == "''"  # nothing to add a newline to
    assert call({"argv": prog})["stdout"] == "''"


def test_strip_empty_ends_strips_only_the_line_ends_at_the_end(tmp_path):
    prog = [PY, "-c", "import sys; sys.stdout.write('  a\\n\\nb  \\r\\n\\n\\n'); sys.stderr.write('e\\n\\n')"]
    res = call({"argv": prog})
    assert res["stdout"] == "  a\n\nb  " and res["stdout_lines"] == ["  a", "", "b  "]
    assert res["stderr"] == "e" and res["stderr_lines"] == ["e"]
    kept = call({"argv": prog, "strip_empty_ends": False})
    assert kept["stdout"] == "  a\n\nb  \r\n\n\n" and kept["stdout_lines"] == ["  a", "", "b  ", "", ""]
    assert kept["stderr"] == "e\n\n"


def test_chdir_sets_the_working_folder(tmp_path):
    assert call({"argv": ["pwd"], "chdir": str(tmp_path)})["stdout"] == str(tmp_path)


def test_long_output_is_truncated_with_a_note(tmp_path):
    res = call({"argv": [PY, "-c", "print('a' * 200000)"]})
    assert res["stdout_truncated_chars"] > 0 and "characters cut" in res["stdout"]
    assert len(res["stdout"]) < 70000


# ---------------------------------------------------------------- failures


def test_nonzero_rc_fails_changed_quoting_the_last_stderr_lines(tmp_path):
    prog = [PY, "-c", "import sys\nfor i in range(30): print('line', i, file=sys.stderr)\nsys.exit(3)"]
    res = call({"argv": prog})
    assert res["failed"] is True and res["changed"] is True  # as Ansible: the program ran
    assert res["msg"].startswith("non-zero return code: command ") and "rc 3" in res["msg"]
    assert "line 29" in res["msg"] and "line 5\n" not in res["msg"]
    assert res["rc"] == 3 and "line 0" in res["stderr"] and res["stderr_lines"][0] == "line 0"


def test_nonzero_rc_by_hand_exits_1_with_the_result(tmp_path):
    rc, res = cli(tmp_path, {"cmd": "false"})
    assert rc == 1 and res["failed"] is True and res["rc"] == 1 and res["msg"].startswith("non-zero return code")
    assert res["msg"].endswith("and printed nothing")


def test_expect_rc_accepts_listed_codes(tmp_path):
    res = call({"argv": [PY, "-c", "raise SystemExit(3)"], "expect_rc": [0, 3]})
    assert res["rc"] == 3 and res["changed"] is True and not res.get("failed")
    res = call({"argv": ["true"], "expect_rc": [1]})
    assert res["failed"] is True and res["msg"].startswith("return code 0 is not in expect_rc")


def test_timeout_stops_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    res = call({"argv": ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], "timeout_s": 0.5})
    assert res["failed"] is True and "timed out after 0.5 s" in res["msg"] and res["rc"] is None
    assert time.monotonic() - start < 5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_background_child_holding_output_gives_a_warning_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(commands, "PIPE_DRAIN_S", 0.3)
    start = time.monotonic()
    res = call({"argv": ["sh", "-c", "sleep 5 & echo $!"]})
    pid = int(res["stdout"].split()[0])
    try:
        assert time.monotonic() - start < 3
        assert any("holds its output open" in w for w in res["warnings"])
    finally:
        os.kill(pid, 9)


@pytest.mark.parametrize(
    "args, words",
    [
        ({"argv": ["dfp-no-such-program-xyz"]}, "not found on PATH"),
        ({"cmd": "dfp-no-such-program-xyz"}, "not found on PATH; install it or give its full path in the first word"),
        ({"argv": ["/nonexistent/prog"]}, "not found; install it"),
        ({"argv": ["ls"], "chdir": "/nonexistent-dir"},
         "^Unable to change directory before execution: chdir '/nonexistent-dir' is not a directory"),
        ({"argv": ["ls"], "expect_rc": ["zero"]}, "expect_rc must be a list of integers"),
        ({"argv": ["ls"], "env": {"A": None}}, r"env\['A'\]"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=words):
        call(args)


def test_a_program_not_found_keeps_ansibles_fields_with_the_errno_as_rc(tmp_path):
    rc, res = cli(tmp_path, {"cmd": "dfp-no-such-program-xyz --flag"})
    assert rc == 1 and res["failed"] is True and res["changed"] is False
    assert res["rc"] == 2 and res["cmd"] == ["dfp-no-such-program-xyz", "--flag"] and res["stdout_lines"] == []


def test_unknown_argument_is_refused_by_the_contract(tmp_path):
    rc, res = cli(tmp_path, {"argv": ["ls"], "shell": True})
    assert rc == 1 and "unknown argument(s) shell" in res["msg"]
