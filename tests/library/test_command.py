"""library/command.py: real programs, run by hand (CLI) and through run() with a Context."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from _helpers import load_module, run_by_hand, run_module

from dflash_host.module import ModuleError

command = load_module("command")


def call(args: dict, check: bool = False, diff: bool = False) -> dict:
    return run_module(command, args, check=check, diff=diff, warnings=True)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("command", tmp_path, args, *flags, quiet=False)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


# ---------------------------------------------------------------- pure decisions


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["ls", "-l"], ["ls", "-l"]),
        (["sleep", 1], ["sleep", "1"]),
        (("echo", 1.5), ["echo", "1.5"]),
    ],
)
def test_argv_items_become_strings(argv, expected):
    assert command.check_argv(argv) == expected


@pytest.mark.parametrize(
    "argv, words",
    [
        ("ls -l", "give a list instead"),
        ([], "non-empty list"),
        (["ls", None], "argv[1]"),
        (["ls", ["x"]], "argv[1]"),
        (["ls", True], "argv[1]"),
        ({"a": 1}, "non-empty list"),
    ],
)
def test_bad_argv_is_refused_with_the_fix(argv, words):
    with pytest.raises(ModuleError, match=words.replace("[", r"\[").replace("]", r"\]")):
        command.check_argv(argv)


@pytest.mark.parametrize(
    "creates, removes, present, reason",
    [
        (None, None, set(), None),
        ("/a", None, {"/a"}, "/a exists"),
        ("/a", None, set(), None),
        (None, "/b", set(), "/b does not exist"),
        (None, "/b", {"/b"}, None),
        ("/a", "/b", {"/b"}, None),
    ],
)
def test_skip_reason_table(creates, removes, present, reason):
    assert command.skip_reason(creates, removes, exists=lambda p: p in present) == reason


def test_truncate_keeps_head_and_tail_with_a_note():
    text = "H" * 100 + "x" * 1000 + "T" * 100
    out, cut = command.truncate(text, limit=400)
    assert cut == 800
    assert out.startswith("H" * 100) and out.endswith("T" * 100)
    assert "800 characters cut" in out
    assert command.truncate("short", limit=400) == ("short", 0)


# ---------------------------------------------------------------- behaviour


def test_cli_runs_the_program_and_reports_rc_stdout_duration(tmp_path):
    rc, res = cli(tmp_path, {"argv": [sys.executable, "-c", "print('hello')"]})
    assert rc == 0
    assert res["rc"] == 0 and res["stdout"] == "hello\n" and res["changed"] is True and res["ran"] is True
    assert res["duration_s"] >= 0 and not res["failed"]


def test_cli_string_argv_fails_with_a_list_hint(tmp_path):
    rc, res = cli(tmp_path, {"argv": "rm -rf /tmp/x"})
    assert rc == 1 and res["failed"] is True and "give a list instead" in res["msg"]


def test_creates_makes_the_second_run_report_no_change(tmp_path):
    marker = tmp_path / "built"
    args = {"argv": ["touch", str(marker)], "creates": str(marker)}
    first = call(args)
    assert first["changed"] is True and marker.exists()
    second = call(args)
    assert second["changed"] is False and second["ran"] is False and second["rc"] is None
    assert "exists" in second["msg"]


def test_removes_skips_when_the_path_is_absent(tmp_path):
    target = tmp_path / "old"
    target.write_text("x")
    args = {"argv": ["rm", str(target)], "removes": str(target)}
    assert call(args)["changed"] is True and not target.exists()
    assert call(args)["changed"] is False


def test_relative_creates_is_taken_from_chdir(tmp_path):
    (tmp_path / "out.txt").write_text("done")
    res = call({"argv": ["false"], "chdir": str(tmp_path), "creates": "out.txt"})
    assert res["changed"] is False and res["ran"] is False


def test_check_mode_does_not_run_and_says_it_would(tmp_path):
    marker = tmp_path / "m"
    rc, res = cli(tmp_path, {"argv": ["touch", str(marker)]}, "--check")
    assert rc == 0 and res["changed"] is True and "would run" in res["msg"]
    assert not marker.exists()
    assert res["rc"] is None and res["stdout"] == ""  # registered keys stay defined


def test_check_safe_command_runs_in_check_mode(tmp_path):
    res = call({"argv": ["echo", "read-only"], "check_safe": True}, check=True)
    assert res["ran"] is True and res["stdout"] == "read-only\n"


def test_env_is_added_to_the_inherited_environment(tmp_path):
    res = call(
        {
            "argv": [sys.executable, "-c", "import os; print(os.environ['DFP_X'], 'PATH' in os.environ)"],
            "env": {"DFP_X": 42},
        }
    )
    assert res["stdout"] == "42 True\n"


def test_stdin_is_fed_and_otherwise_empty(tmp_path):
    prog = [sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"]
    assert call({"argv": prog, "stdin": "abc\n"})["stdout"] == "'abc\\n'\n"
    assert call({"argv": prog})["stdout"] == "''\n"


def test_chdir_sets_the_working_folder(tmp_path):
    assert call({"argv": ["pwd"], "chdir": str(tmp_path)})["stdout"].strip() == str(tmp_path)


def test_nonzero_rc_fails_quoting_the_last_stderr_lines(tmp_path):
    prog = [
        sys.executable,
        "-c",
        "import sys\nfor i in range(30): print('line', i, file=sys.stderr)\nsys.exit(3)",
    ]
    with pytest.raises(ModuleError) as err:
        call({"argv": prog})
    assert "rc 3" in err.value.msg and "line 29" in err.value.msg and "line 5\n" not in err.value.msg
    assert err.value.data["rc"] == 3 and "line 0" in err.value.data["stderr"]


def test_expect_rc_accepts_listed_codes(tmp_path):
    res = call({"argv": [sys.executable, "-c", "raise SystemExit(3)"], "expect_rc": [0, 3]})
    assert res["rc"] == 3 and res["changed"] is True


def test_timeout_stops_the_whole_process_group(tmp_path):
    pidfile = tmp_path / "child.pid"
    start = time.monotonic()
    with pytest.raises(ModuleError, match="timed out after 0.5 s"):
        call({"argv": ["sh", "-c", f"sleep 30 & echo $! > {pidfile}; wait"], "timeout_s": 0.5})
    assert time.monotonic() - start < 5
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 3
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_background_child_holding_output_gives_a_warning_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.setattr(command, "PIPE_DRAIN_S", 0.3)
    start = time.monotonic()
    res = call({"argv": ["sh", "-c", "sleep 5 & echo $!"]})
    pid = int(res["stdout"].split()[0])
    try:
        assert time.monotonic() - start < 3
        assert any("holds its output open" in w for w in res["warnings"])
    finally:
        os.kill(pid, 9)


def test_long_output_is_truncated_with_a_note(tmp_path):
    res = call({"argv": [sys.executable, "-c", "print('a' * 200000)"]})
    assert res["stdout_truncated_chars"] > 0 and "characters cut" in res["stdout"]
    assert len(res["stdout"]) < 70000


@pytest.mark.parametrize(
    "args, words",
    [
        ({"argv": ["dfp-no-such-program-xyz"]}, "not found on PATH"),
        ({"argv": ["/nonexistent/prog"]}, "not found; install it"),
        ({"argv": ["ls"], "chdir": "/nonexistent-dir"}, "chdir '/nonexistent-dir' is not a directory"),
        ({"argv": ["ls"], "expect_rc": ["zero"]}, "expect_rc must be a list of integers"),
        ({"argv": ["ls"], "env": {"A": None}}, r"env\['A'\]"),
    ],
)
def test_bad_input_gives_a_clear_error(args, words):
    with pytest.raises(ModuleError, match=words):
        call(args)


def test_unknown_argument_is_refused_by_the_contract(tmp_path):
    rc, res = cli(tmp_path, {"argv": ["ls"], "shell": True})
    assert rc == 1 and "unknown argument(s) shell" in res["msg"]
