"""library/lineinfile.py: the edit as a table, then real files through run() and the CLI, then a playbook written
the Ansible way through the engine. What Ansible's module does with the same files and arguments is
tests/library/test_lineinfile_against_ansible.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from _helpers import load_module, run_by_hand, run_module, snapshot

from dflash_host.module import ModuleError, check_args

lineinfile = load_module("lineinfile")


def call(args: dict, check: bool = False, diff: bool = False, warnings: bool = False) -> dict:
    return run_module(lineinfile, args, check=check, diff=diff, warnings=warnings)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("lineinfile", tmp_path, args, *flags)


# ---------------------------------------------------------------- the edit, as a table

EDITS = [
    # text, line, regexp, insertafter, insertbefore -> new text, msg
    (b"a\nb\n", b"c", None, None, None, b"a\nb\nc\n", "line added"),
    (b"a\nb\n", b"b", None, None, None, b"a\nb\n", ""),
    (b"a\nb", b"c", None, None, None, b"a\nb\nc\n", "line added"),  # missing final newline added
    (b"", b"c", None, None, None, b"c\n", "line added"),
    (b"PORT=1\nX=2\n", b"PORT=8000", rb"^PORT=", None, None, b"PORT=8000\nX=2\n", "line replaced"),
    (b"PORT=8000\nX=2\n", b"PORT=8000", rb"^PORT=", None, None, b"PORT=8000\nX=2\n", ""),
    (b"P=1\nP=2\n", b"P=3", rb"^P=", None, None, b"P=1\nP=3\n", "line replaced"),  # the last match is replaced
    (b"X=2\n", b"PORT=8000", rb"^PORT=", None, None, b"X=2\nPORT=8000\n", "line added"),  # no match: added
    (b"X=2\nexport A=1\n", b"export A=1", rb"^A=", None, None, b"X=2\nexport A=1\n", ""),  # exact line kept
    (b"[a]\nk=1\n[b]\nk=2\n", b"new=1", None, r"^\[a\]", None, b"[a]\nnew=1\nk=1\n[b]\nk=2\n", "line added"),
    (b"x\n", b"new", None, r"^\[nomatch\]", None, b"x\nnew\n", "line added"),  # insertafter without match: EOF
    (b"a\nmark\nb\n", b"L", None, None, "^mark", b"a\nL\nmark\nb\n", "line added"),
    (b"a\n", b"L", None, "BOF", None, b"L\na\n", "line added"),
    (b"a\n", b"L", None, None, "BOF", b"L\na\n", "line added"),
    (b"a\nmark", b"L", None, "^mark", None, b"a\nmark\nL\n", "line added"),  # not glued on (Ansible's is)
    # Ansible's: a new or replaced line ends in \n, in a CRLF file too (before, this module kept CRLF)
    (b"a\r\nb\r\n", b"c", None, None, None, b"a\r\nb\r\nc\n", "line added"),
    (b"a\r\nold\r\n", b"new", b"^old", None, None, b"a\r\nnew\n", "line replaced"),
    (b"a\r\nc\r\n", b"c", None, None, None, b"a\r\nc\n", "line replaced"),
]


@pytest.mark.parametrize("text, line, regexp, after, before, expected, msg", EDITS)
def test_present_table(text, line, regexp, after, before, expected, msg):
    rx = None if regexp is None else re.compile(regexp)
    new, what = lineinfile.present(text.splitlines(keepends=True), line, rx, None, after, before)
    assert (b"".join(new), what) == (expected, msg)
    again, what2 = lineinfile.present(new, line, rx, None, after, before)
    assert again == new and what2 == ""  # every edit is idempotent


@pytest.mark.parametrize("text, line, regexp, search, expected, found", [
    (b"a\nb\na\n", b"a", None, None, b"b\n", 2),
    (b"a\nb\n", b"z", None, None, b"a\nb\n", 0),
    (b"# c\nK=1\nK=2\nL=3\n", None, rb"^K=", None, b"# c\nL=3\n", 2),
    (b"x.y\nxzy\n", None, None, b"x.y", b"xzy\n", 1),
    (b"a\r\nb\r\n", b"a", None, None, b"b\r\n", 1),
])
def test_absent_table(text, line, regexp, search, expected, found):
    rx = None if regexp is None else re.compile(regexp)
    new, n = lineinfile.absent(text.splitlines(keepends=True), line, rx, search)
    assert (b"".join(new), n) == (expected, found)


def test_backrefs_fill_the_line_from_the_groups_and_no_match_changes_nothing():
    rx = re.compile(rb"^(.*)Xms(\d+)m(.*)$")
    new, msg = lineinfile.present([b"-Xms128m -Xmx1g\n"], rb"\1Xms512m\3", rx, None, None, None, backrefs=True)
    assert (new, msg) == ([b"-Xms512m -Xmx1g\n"], "line replaced")
    assert lineinfile.present([b"a\n"], rb"\1", re.compile(rb"^zz(.*)"), None, None, None, backrefs=True) == (
        [b"a\n"], "")


# ---------------------------------------------------------------- real files


def test_cli_adds_the_line_then_reports_no_change(tmp_path):
    f = tmp_path / "env"
    f.write_text("A=1\n")
    args = {"path": str(f), "line": "VLLM_PORT=8000", "regexp": "^VLLM_PORT="}
    rc, first = cli(tmp_path, args)
    assert rc == 0 and (first["changed"], first["msg"]) == (True, "line added")
    assert f.read_text() == "A=1\nVLLM_PORT=8000\n"
    rc, second = cli(tmp_path, args)
    assert rc == 0 and (second["changed"], second["msg"], second["backup"]) == (False, "", "")


def test_check_mode_changes_nothing_and_diff_shows_before_after(tmp_path):
    f = tmp_path / "env"
    f.write_text("PORT=1\n")
    os.chmod(f, 0o644)
    before = snapshot(tmp_path, files_only=True)
    res = call({"path": str(f), "line": "PORT=2", "regexp": "^PORT=", "mode": "0600"}, check=True, diff=True)
    assert res["changed"] is True and res["msg"] == "line replaced and ownership, perms or SE linux context changed"
    assert res["diff"]["before"] == "PORT=1\n" and res["diff"]["after"] == "PORT=2\n"
    assert res["diff"]["before_header"] == f"{f} (content)" and res["diff"]["after_mode"] == "0600"
    assert snapshot(tmp_path, files_only=True) == before
    created = call({"path": str(tmp_path / "new"), "line": "x", "create": True}, check=True)
    assert (created["changed"], created["msg"]) == (True, "line added") and snapshot(tmp_path, files_only=True) == before


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
    assert res["diff"]["before"] == ""  # Ansible's: "" for a file not there before
    again = call({"path": str(f), "line": "k=v", "create": True, "mode": "0640"})
    assert (again["changed"], again["msg"]) == (False, "")


def test_a_new_file_without_mode_gets_0666_less_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        res = call({"path": str(tmp_path / "f"), "line": "x", "create": True})
    finally:
        os.umask(old)
    assert res["msg"] == "line added" and (tmp_path / "f").stat().st_mode & 0o7777 == 0o640


def test_mode_only_is_fixed_in_place(tmp_path):
    f = tmp_path / "f"
    f.write_text("k=v\n")
    os.chmod(f, 0o644)
    res = call({"path": str(f), "line": "k=v", "mode": "0600"})
    assert (res["changed"], res["msg"]) == (True, "ownership, perms or SE linux context changed")
    assert (f.stat().st_mode & 0o7777) == 0o600
    assert call({"path": str(f), "line": "k=v", "mode": 0o600})["changed"] is False  # YAML's 0600 is 384


def test_owner_and_group_are_compared_and_kept(tmp_path):
    import grp
    import pwd

    f = tmp_path / "f"
    f.write_text("a\n")
    me, mine = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    res = call({"path": str(f), "line": "b", "owner": me, "group": mine})
    assert (res["msg"], f.stat().st_uid, f.stat().st_gid) == ("line added", os.getuid(), os.getgid())
    with pytest.raises(ModuleError, match="owner 'no-such-user-x' does not exist"):
        call({"path": str(f), "line": "b", "owner": "no-such-user-x"})


@pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")
def test_an_owner_change_keeps_the_setuid_mode_asked_for(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\n")
    os.chmod(f, 0o4755)
    res = call({"path": str(f), "line": "a", "owner": "65534", "mode": "04755"})
    assert (res["changed"], res["msg"]) == (True, "ownership, perms or SE linux context changed")
    assert (f.stat().st_uid, f.stat().st_mode & 0o7777) == (65534, 0o4755)  # set again after the chown cleared it


def test_existing_mode_is_kept_and_backup_keeps_the_old_text_under_ansibles_name(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\n")
    os.chmod(f, 0o600)
    res = call({"path": str(f), "line": "b", "backup": True})
    assert (f.stat().st_mode & 0o7777) == 0o600 and Path(res["backup"]).read_text() == "a\n"
    assert re.fullmatch(re.escape(str(f)) + r"\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~", res["backup"])
    second = call({"path": str(f), "line": "c", "backup": True})  # the same second, the same worker: a new name
    assert second["backup"] != res["backup"] and Path(second["backup"]).read_text() == "a\nb\n"
    assert Path(res["backup"]).read_text() == "a\n"


def test_absent_removes_matching_lines_and_a_missing_file_is_fine(tmp_path):
    f = tmp_path / "f"
    f.write_text("keep\nDEBUG=1\nDEBUG=2\n")
    res = call({"path": str(f), "regexp": "^DEBUG=", "state": "absent"})
    assert (res["changed"], res["msg"], res["found"]) == (True, "2 line(s) removed", 2)
    assert f.read_text() == "keep\n"
    missing = call({"path": str(tmp_path / "missing"), "line": "x", "state": "absent"})
    assert missing == {"changed": False, "msg": "file not present"}


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


def test_validate_runs_on_the_temp_file_and_a_failure_leaves_the_file_as_it_was(tmp_path):
    f = tmp_path / "sudoers"
    f.write_text("a\n")
    seen = tmp_path / "seen"
    ok = call({"path": str(f), "line": "wanted", "validate": f"cp %s {seen}"})
    assert ok["msg"] == "line added" and seen.read_text() == "a\nwanted\n" and f.read_text() == "a\nwanted\n"
    assert os.path.dirname(os.path.realpath(seen)) == str(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(ModuleError, match=r"^failed to validate: rc:1 error:.*the file is unchanged"):
        call({"path": str(f), "line": "other", "validate": "grep -q nothere %s", "backup": True})
    assert snapshot(tmp_path) == before  # no temp file, no backup left


def test_validate_has_no_shell_and_a_missing_command_is_a_message(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\n")
    marker = tmp_path / "marker"
    call({"path": str(f), "line": "b", "validate": f"echo %s ; touch {marker}"})  # `;` and touch: words echo prints
    assert not marker.exists() and f.read_text() == "a\nb\n"
    with pytest.raises(ModuleError, match="failed to validate: cannot run 'no-such-validator-x'"):
        call({"path": str(f), "line": "c", "validate": "no-such-validator-x %s"})
    assert f.read_text() == "a\nb\n"


def test_empty_regexp_warns_as_ansible_does(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\nb\n")
    res = call({"path": str(f), "regexp": "", "line": "c"}, warnings=True)
    assert res["msg"] == "line replaced" and "The regular expression is an empty string" in res["warnings"][0]


@pytest.mark.parametrize(
    "args, words",
    [
        ({"line": "x"}, r"^Destination .*missing does not exist ! Set create: true"),
        ({}, "^line is required with state=present"),
        ({"state": "absent"}, "^one of line, search_string, or regexp is required with state=absent"),
        ({"line": "x", "backrefs": True}, "^regexp is required with backrefs=true"),
        ({"line": "x", "insertafter": "a", "insertbefore": "b"}, "^parameters are mutually exclusive: insertbefore"),
        ({"line": "x", "regexp": "a", "search_string": "a"}, "^parameters are mutually exclusive: regexp"),
        ({"line": "x", "validate": "visudo -cf"}, "^validate must contain %s: visudo -cf"),
        ({"line": "x", "regexp": "("}, "regexp '\\(' is not a valid regex"),
        ({"line": "x", "insertafter": "[", "create": True}, "insertafter '\\[' is not a valid regex"),
        ({"line": "x", "insertbefore": "[", "create": True}, "insertbefore '\\[' is not a valid regex"),
        ({"line": "x", "create": True, "mode": "644x"}, "not an octal number"),
        ({"line": "x", "create": True, "mode": "u+rw"}, "symbolic modes"),
        ({"line": "x", "state": "gone"}, "choose one of: present, absent"),
    ],
)
def test_bad_input_gives_a_clear_error_and_changes_nothing(tmp_path, args, words):
    before = snapshot(tmp_path, files_only=True)
    with pytest.raises(ModuleError, match=words):
        call({"path": str(tmp_path / "missing"), **args})
    assert snapshot(tmp_path, files_only=True) == before


def test_directory_path_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="is a directory !") as err:
        call({"path": str(tmp_path), "line": "x"})
    assert err.value.data == {"rc": 256}


def test_create_makes_missing_folders_too(tmp_path):
    f = tmp_path / "no" / "such" / "f"
    assert call({"path": str(f), "line": "x", "create": True}, check=True)["changed"] is True
    assert not (tmp_path / "no").exists()
    call({"path": str(f), "line": "x", "create": True})
    assert f.read_text() == "x\n"


def test_check_mode_on_a_missing_file_fails_as_ansibles_does(tmp_path):
    """Before, this module only warned here (an earlier task skipped by check mode may create the file); Ansible
    fails the task, and a playbook written for Ansible expects that."""
    with pytest.raises(ModuleError, match="does not exist !") as err:
        call({"path": str(tmp_path / "later"), "line": "x"}, check=True)
    assert err.value.data == {"rc": 257} and not (tmp_path / "later").exists()


# ---------------------------------------------------------------- aliases (ARGS "alias_of", the contract's)


def test_aliases_give_their_value_to_the_option():
    got = check_args(lineinfile.ARGS, {"dest": "/tmp/x", "regex": "^a", "value": "a=1"}, "lineinfile")
    assert (got["path"], got["regexp"], got["line"]) == ("/tmp/x", "^a", "a=1")
    assert not {"dest", "destfile", "name", "regex", "value"} & set(got)
    same = check_args(lineinfile.ARGS, {"path": "/tmp/x", "name": "/tmp/x", "line": "a"}, "lineinfile")
    assert same["path"] == "/tmp/x"


@pytest.mark.parametrize("args, words", [
    ({"path": "/a", "dest": "/b"}, "'path' and 'dest' \\(both 'path'\\) are given, as '/a' and '/b'"),
    ({"dest": "/a", "name": "/b"}, "'dest' and 'name' \\(both 'path'\\)"),
])
def test_an_option_and_its_alias_with_different_values_are_refused(args, words):
    with pytest.raises(ModuleError, match=words):
        check_args(lineinfile.ARGS, {**args, "line": "x"}, "lineinfile")


def test_no_path_at_all_says_which_names_it_takes():
    with pytest.raises(ModuleError, match="^missing required arguments: path; give path \\(or its alias dest"):
        call({"line": "x"})


# ---------------------------------------------------------------- a playbook written for Ansible


def _play(tmp_path: Path, tasks: list, check: bool = False):
    from engine.api import run_playbook

    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local"}}}}))
    return run_playbook(str(pb), str(inv), check=check)


def test_a_playbook_using_ansibles_options_loads_and_runs(tmp_path):
    f = tmp_path / "sshd_config"
    f.write_text("Port 22\n#PermitRootLogin yes\nUsePAM yes")
    tasks = [
        {"name": "deny root", "ansible.builtin.lineinfile": {
            "dest": str(f), "regexp": "^#?PermitRootLogin", "line": "PermitRootLogin no", "backup": True,
            "validate": "grep -q PermitRootLogin %s"}, "register": "root"},
        {"name": "a comment first", "ansible.builtin.lineinfile": {
            "path": str(f), "line": "# managed", "insertbefore": "BOF"}},
        {"name": "after Port", "lineinfile": {"name": str(f), "line": "AddressFamily inet", "insertafter": "^Port "}},
        {"name": "the old port", "lineinfile": {"path": str(f), "regexp": "^Port (\\d+)$", "line": "Port \\1 # kept",
                                                "backrefs": True, "firstmatch": True}},
        {"name": "no PAM", "lineinfile": {"path": str(f), "search_string": "UsePAM", "state": "absent"},
         "register": "pam"},
    ]
    res = _play(tmp_path, tasks)
    assert res.exit_code == 0, res.tasks
    assert f.read_text() == "# managed\nPort 22 # kept\nAddressFamily inet\nPermitRootLogin no\n"
    assert res.registered["h"]["root"]["msg"] == "line replaced" and res.registered["h"]["root"]["backup"]
    assert (res.registered["h"]["pam"]["found"], res.registered["h"]["pam"]["msg"]) == (1, "1 line(s) removed")
    again = _play(tmp_path, tasks[1:4])
    assert again.exit_code == 0 and again.recap["h"]["changed"] == 0


def test_an_ansible_option_we_do_not_take_is_refused_when_the_playbook_loads(tmp_path):
    f = tmp_path / "f"
    f.write_text("a\n")
    res = _play(tmp_path, [{"name": "x", "lineinfile": {"path": str(f), "line": "b", "unsafe_writes": True}}])
    assert res.exit_code == 4 and "has no argument(s) unsafe_writes" in res.error
    assert f.read_text() == "a\n"
