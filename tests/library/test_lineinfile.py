"""library/lineinfile.py: the edit as a table, then real files through run() and the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _helpers import load_module, run_by_hand, run_module, snapshot

from dflash_host.module import Context, ModuleError, check_args

lineinfile = load_module("lineinfile")


def call(args: dict, check: bool = False, diff: bool = False) -> dict:
    return run_module(lineinfile, args, check=check, diff=diff)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("lineinfile", tmp_path, args, *flags)


# ---------------------------------------------------------------- the edit, as a table

EDITS = [
    # text, line, regexp, state, insertafter -> new text, changed
    ("a\nb\n", "c", None, "present", "EOF", "a\nb\nc\n", True),
    ("a\nb\n", "b", None, "present", "EOF", "a\nb\n", False),
    ("a\nb", "c", None, "present", "EOF", "a\nb\nc\n", True),  # missing final newline added
    ("", "c", None, "present", "EOF", "c\n", True),
    ("PORT=1\nX=2\n", "PORT=8000", r"^PORT=", "present", "EOF", "PORT=8000\nX=2\n", True),
    ("PORT=8000\nX=2\n", "PORT=8000", r"^PORT=", "present", "EOF", "PORT=8000\nX=2\n", False),
    ("P=1\nP=2\n", "P=3", r"^P=", "present", "EOF", "P=1\nP=3\n", True),  # the last match is replaced
    ("X=2\n", "PORT=8000", r"^PORT=", "present", "EOF", "X=2\nPORT=8000\n", True),  # no match: added
    (
        "X=2\nexport A=1\n",
        "export A=1",
        r"^A=",
        "present",
        "EOF",
        "X=2\nexport A=1\n",
        False,
    ),  # exact line kept
    ("[a]\nk=1\n[b]\nk=2\n", "new=1", None, "present", r"^\[a\]", "[a]\nnew=1\nk=1\n[b]\nk=2\n", True),
    ("x\n", "new", None, "present", r"^\[nomatch\]", "x\nnew\n", True),  # insertafter without match: EOF
    ("a\r\nb\r\n", "c", None, "present", "EOF", "a\r\nb\r\nc\r\n", True),  # keeps CRLF
    ("a\r\nold\r\n", "new", "^old", "present", "EOF", "a\r\nnew\r\n", True),
    ("a\nb\na\n", "a", None, "absent", "EOF", "b\n", True),
    ("a\nb\n", "z", None, "absent", "EOF", "a\nb\n", False),
    ("# c\nK=1\nK=2\nL=3\n", None, r"^K=", "absent", "EOF", "# c\nL=3\n", True),
]


@pytest.mark.parametrize("text, line, regexp, state, after, expected, changed", EDITS)
def test_edit_table(text, line, regexp, state, after, expected, changed):
    new, what = lineinfile.edit(text, line, regexp, state, after)
    assert new == expected
    assert (what is not None) == changed
    again, what2 = lineinfile.edit(new, line, regexp, state, after)
    assert again == new and what2 is None  # every edit is idempotent


# ---------------------------------------------------------------- real files


def test_cli_adds_the_line_then_reports_no_change(tmp_path):
    f = tmp_path / "env"
    f.write_text("A=1\n")
    args = {"path": str(f), "line": "VLLM_PORT=8000", "regexp": "^VLLM_PORT="}
    rc, first = cli(tmp_path, args)
    assert rc == 0 and first["changed"] is True and f.read_text() == "A=1\nVLLM_PORT=8000\n"
    rc, second = cli(tmp_path, args)
    assert rc == 0 and second["changed"] is False


def test_check_mode_changes_nothing_and_diff_shows_before_after(tmp_path):
    f = tmp_path / "env"
    f.write_text("PORT=1\n")
    before = snapshot(tmp_path, files_only=True)
    res = call({"path": str(f), "line": "PORT=2", "regexp": "^PORT=", "mode": "0600"}, check=True, diff=True)
    assert res["changed"] is True and res["msg"].startswith("check mode: would have replaced a line")
    assert res["diff"]["before"] == "PORT=1\n" and res["diff"]["after"] == "PORT=2\n"
    assert res["diff"]["after_mode"] == "0600"
    assert snapshot(tmp_path, files_only=True) == before
    created = call({"path": str(tmp_path / "new"), "line": "x", "create": True}, check=True)
    assert created["changed"] is True and snapshot(tmp_path, files_only=True) == before


def test_cli_check_flag_changes_nothing(tmp_path):
    f = tmp_path / "env"
    f.write_text("A=1\n")
    rc, res = cli(tmp_path, {"path": str(f), "line": "B=2"}, "--check", "--diff")
    assert rc == 0 and res["changed"] is True and res["diff"]["after"] == "A=1\nB=2\n"
    assert f.read_text() == "A=1\n"


def test_create_makes_the_file_with_mode(tmp_path):
    f = tmp_path / "new.conf"
    res = call({"path": str(f), "line": "k=v", "create": True, "mode": "0640"}, diff=True)
    assert f.read_text() == "k=v\n" and (f.stat().st_mode & 0o7777) == 0o640
    assert res["diff"]["before"] is None
    assert call({"path": str(f), "line": "k=v", "create": True, "mode": "0640"})["changed"] is False


def test_mode_only_is_fixed_in_place(tmp_path):
    f = tmp_path / "f"
    f.write_text("k=v\n")
    os.chmod(f, 0o644)
    res = call({"path": str(f), "line": "k=v", "mode": "0600"})
    assert res["changed"] is True and "mode 0600" in res["msg"] and (f.stat().st_mode & 0o7777) == 0o600


def test_existing_mode_is_kept_and_backup_keeps_the_old_text(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\n")
    os.chmod(f, 0o600)
    res = call({"path": str(f), "line": "b", "backup": True})
    assert (f.stat().st_mode & 0o7777) == 0o600 and Path(res["backup_file"]).read_text() == "a\n"


def test_absent_removes_matching_lines_and_a_missing_file_is_fine(tmp_path):
    f = tmp_path / "f"
    f.write_text("keep\nDEBUG=1\nDEBUG=2\n")
    assert call({"path": str(f), "regexp": "^DEBUG=", "state": "absent"})["changed"] is True
    assert f.read_text() == "keep\n"
    assert call({"path": str(tmp_path / "missing"), "line": "x", "state": "absent"})["changed"] is False


def test_symlink_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real"
    real.write_text("a\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    call({"path": str(link), "line": "b"})
    assert link.is_symlink() and real.read_text() == "a\nb\n"


def test_non_utf8_bytes_elsewhere_in_the_file_are_kept(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"caf\xe9\n")
    call({"path": str(f), "line": "x"})
    assert f.read_bytes() == b"caf\xe9\nx\n"


@pytest.mark.parametrize(
    "args, words",
    [
        ({"line": "x"}, "does not exist; set create: true"),
        ({}, "state present needs 'line'"),
        ({"state": "absent"}, "needs 'line' or 'regexp'"),
        ({"line": "a\nb"}, "contains a newline"),
        ({"line": "x", "regexp": "("}, "regexp '\\(' is not a valid regex"),
        ({"line": "x", "insertafter": "[", "create": True}, "insertafter '\\[' is not a valid regex"),
        ({"line": "x", "create": True, "mode": "644x"}, "not an octal number"),
        ({"line": "x", "state": "gone"}, "choose one of: present, absent"),
    ],
)
def test_bad_input_gives_a_clear_error_and_changes_nothing(tmp_path, args, words):
    before = snapshot(tmp_path, files_only=True)
    with pytest.raises(ModuleError, match=words):
        call({"path": str(tmp_path / "missing"), **args})
    assert snapshot(tmp_path, files_only=True) == before


def test_directory_path_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="is a directory"):
        call({"path": str(tmp_path), "line": "x"})


def test_create_makes_missing_folders_too(tmp_path):
    f = tmp_path / "no" / "such" / "f"
    assert call({"path": str(f), "line": "x", "create": True}, check=True)["changed"] is True
    assert not (tmp_path / "no").exists()
    call({"path": str(f), "line": "x", "create": True})
    assert f.read_text() == "x\n"


def test_check_mode_on_a_missing_file_warns_instead_of_failing(tmp_path):
    """An earlier task (skipped by check mode) may be the one that creates the file."""
    ctx = Context(check=True)
    res = lineinfile.run(check_args(lineinfile.ARGS, {"path": str(tmp_path / "later"), "line": "x"}, "lineinfile"), ctx)
    assert res["changed"] is True and "does not exist yet" in res["msg"]
    assert "a real run fails here" in ctx.warnings[0] and not (tmp_path / "later").exists()
