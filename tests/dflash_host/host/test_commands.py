"""dflash_host/host/commands.py: the decisions command and shell share (argv, cmd's split, expansion, creates/removes,
output cuts, Ansible's time formats). Their runs are tested through the modules: tests/library/test_command.py,
test_shell.py and test_command_against_ansible.py."""

from __future__ import annotations

import datetime
import os
import shlex

import pytest

from dflash_host.host.commands import (
    ansible_delta,
    check_argv,
    expand_argument,
    skip_reason,
    split_cmd,
    truncate,
)
from dflash_host.module import ModuleError


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["ls", "-l"], ["ls", "-l"]),
        (["sleep", 1], ["sleep", "1"]),
        (("echo", 1.5), ["echo", "1.5"]),
    ],
)
def test_argv_items_become_strings(argv, expected):
    assert check_argv(argv) == expected


@pytest.mark.parametrize(
    "argv, words",
    [
        ("ls -l", "give a list instead"),
        ("ls -l", "as cmd:"),
        ([], "non-empty list"),
        (["ls", None], "argv[1]"),
        (["ls", ["x"]], "argv[1]"),
        (["ls", True], "argv[1]"),
        ({"a": 1}, "non-empty list"),
    ],
)
def test_bad_argv_is_refused_with_the_fix(argv, words):
    with pytest.raises(ModuleError, match=words.replace("[", r"\[").replace("]", r"\]")):
        check_argv(argv)


@pytest.mark.parametrize(
    "cmd",
    [
        "ls -l /tmp",
        "echo 'a b' \"c d\" e\\ f",
        "printf '%s\\n' x",
        "echo a|b;c>d",  # no shell: these are characters of the words
        "  spaced   out  ",
        "echo '' \"\"",
    ],
)
def test_cmd_is_split_exactly_as_shlex_splits_it(cmd):
    assert split_cmd(cmd) == shlex.split(cmd)


@pytest.mark.parametrize("cmd, words", [("echo 'open", "cannot be split.*No closing quotation.*argv"),
                                        ("   ", "cmd is empty"), ("", "cmd is empty")])
def test_a_cmd_that_cannot_be_split_is_refused_with_the_fix(cmd, words):
    with pytest.raises(ModuleError, match=words):
        split_cmd(cmd)


@pytest.mark.parametrize(
    "word",
    ["$HOME", "${HOME}/x", "a$HOME", "$DFP_UNSET_X", "${DFP_UNSET_X}", "${}", "$", "$$", "~", "~/x", "a~", "$HOME$HOME",
     "${HOME", "$1"],
)
def test_expansion_is_what_os_path_expandvars_and_expanduser_make(word):
    assert expand_argument(word, dict(os.environ)) == os.path.expanduser(os.path.expandvars(word))


def test_expansion_reads_the_environment_given():
    assert expand_argument("$DFP_X-${DFP_X}", {"DFP_X": "1"}) == "1-1"
    assert expand_argument("$DFP_X", {}) == "$DFP_X"


@pytest.mark.parametrize(
    "creates, removes, present, reason",
    [
        (None, None, set(), None),
        ("/a", None, {"/a"}, ("/a", "exists")),
        ("/a", None, set(), None),
        (None, "/b", set(), ("/b", "does not exist")),
        (None, "/b", {"/b"}, None),
        ("/a", "/b", {"/b"}, None),
        ("/a", "/b", {"/a"}, ("/a", "exists")),  # creates first, as Ansible
    ],
)
def test_skip_reason_table(creates, removes, present, reason):
    assert skip_reason(creates, removes, exists=lambda p: p in present) == reason


def test_skip_reason_takes_a_relative_path_from_chdir_and_says_it_as_given(tmp_path):
    (tmp_path / "out.txt").write_text("x")
    assert skip_reason("out.txt", None, str(tmp_path)) == ("out.txt", "exists")
    assert skip_reason(None, "gone.txt", str(tmp_path)) == ("gone.txt", "does not exist")
    assert skip_reason(str(tmp_path / "out.txt"), None, "/nonexistent") == (str(tmp_path / "out.txt"), "exists")


def test_skip_reason_matches_globs_and_dangling_links(tmp_path):
    (tmp_path / "a.whl").write_text("x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert skip_reason(str(tmp_path / "*.whl"), None) == (str(tmp_path / "*.whl"), "exists")
    assert skip_reason(str(tmp_path / "*.tar"), None) is None
    assert skip_reason(str(tmp_path / "dangling"), None) is not None
    assert skip_reason(None, str(tmp_path / "*.tar")) == (str(tmp_path / "*.tar"), "does not exist")


def test_truncate_keeps_head_and_tail_with_a_note():
    text = "H" * 100 + "x" * 1000 + "T" * 100
    out, cut = truncate(text, limit=400)
    assert cut == 800
    assert out.startswith("H" * 100) and out.endswith("T" * 100)
    assert "800 characters cut" in out
    assert truncate("short", limit=400) == ("short", 0)


@pytest.mark.parametrize(
    "delta, text",
    [
        (datetime.timedelta(microseconds=1529), "0:00:00.001529"),
        (datetime.timedelta(seconds=3), "0:00:03.000000"),
        (datetime.timedelta(hours=2, minutes=5, seconds=7, microseconds=9), "2:05:07.000009"),
        (datetime.timedelta(days=1, seconds=1), "24:00:01.000000"),
    ],
)
def test_delta_is_written_as_ansible_writes_it(delta, text):
    assert ansible_delta(delta) == text
    if delta.microseconds and not delta.days:
        assert ansible_delta(delta) == str(delta)  # Ansible's: str(end - start)
