"""library/file.py: Ansible's states and options, and the rules of what the tool may change (beside
tests/security/test_ownership.py's; tests/library/test_file_against_ansible.py compares it with Ansible's)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _helpers import load_module, run_by_hand, run_module, snapshot

from dflash_host.module import ModuleError

file_mod = load_module("file")


def call(args: dict, check: bool = False, diff: bool = False, warnings: bool = False) -> dict:
    return run_module(file_mod, args, check=check, diff=diff, warnings=warnings)


def mode_of(p: Path) -> int:
    return p.lstat().st_mode & 0o7777


def umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_directory_by_hand_then_no_change(tmp_path):
    args = {"path": str(tmp_path / "a" / "b"), "state": "directory", "mode": "0750"}
    rc, first = run_by_hand("file", tmp_path, args)
    assert rc == 0 and first["changed"] and first["state"] == "directory" and first["mode"] == "0750"
    assert mode_of(tmp_path / "a") == 0o755 & ~umask() and mode_of(tmp_path / "a" / "b") == 0o750
    rc, second = run_by_hand("file", tmp_path, args)
    assert rc == 0 and second["changed"] is False and "diff" not in second


def test_the_engines_own_calls_still_work(tmp_path):
    """engine/run/actions/files.py stages uploads in dest/.dfp-staging: made 0700, removed with what it holds."""
    stage = tmp_path / "dest" / ".dfp-staging"
    assert call({"path": str(stage), "state": "directory", "mode": "0700"})["changed"]
    (stage / ("a" * 64)).write_text("x")
    assert mode_of(stage) == 0o700
    res = call({"path": str(stage), "state": "absent", "recurse": True})
    assert res["changed"] and res["state"] == "absent" and not stage.exists()


def test_absent_removes_a_non_empty_folder_as_ansibles(tmp_path):
    folder = tmp_path / "f"
    (folder / "sub").mkdir(parents=True)
    assert call({"path": str(folder), "state": "absent"})["changed"] is True
    assert not folder.exists()
    assert call({"path": str(tmp_path / "gone"), "state": "absent"})["changed"] is False


def test_absent_removes_a_link_never_what_it_points_at(tmp_path):
    target = tmp_path / "target"
    (target / "keep").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert call({"path": str(link), "state": "absent"})["changed"]
    assert not os.path.lexists(link) and (target / "keep").is_dir()


def test_check_mode_changes_nothing(tmp_path):
    (tmp_path / "f").write_text("x")
    os.chmod(tmp_path / "f", 0o644)
    (tmp_path / "d").mkdir()
    before = snapshot(tmp_path)
    for args in ({"path": str(tmp_path / "new" / "d"), "state": "directory"},
                 {"path": str(tmp_path / "f"), "mode": "0600"},
                 {"path": str(tmp_path / "t"), "state": "touch"},
                 {"path": str(tmp_path / "f"), "state": "touch"},
                 {"path": str(tmp_path / "l"), "state": "link", "src": "f"},
                 {"path": str(tmp_path / "h"), "state": "hard", "src": str(tmp_path / "f")},
                 {"path": str(tmp_path / "f"), "state": "absent"},
                 {"path": str(tmp_path / "d"), "state": "directory", "recurse": True, "mode": "u=rwx,go="}):
        assert call(args, check=True)["changed"] is True, args
    assert snapshot(tmp_path) == before


def test_touch_changes_every_time_unless_the_times_are_preserved(tmp_path):
    path = tmp_path / "t"
    first = call({"path": str(path), "state": "touch"})
    assert first["changed"] and first["dest"] == str(path) and mode_of(path) == 0o666 & ~umask()
    assert call({"path": str(path), "state": "touch"})["changed"] is True
    keep = {"path": str(path), "state": "touch", "modification_time": "preserve", "access_time": "preserve"}
    assert call(keep)["changed"] is False
    stamped = call({"path": str(path), "state": "file", "modification_time": "202001020304.05",
                    "access_time": "202001020304.05"}, diff=True)
    assert stamped["changed"] and int(path.stat().st_mtime) == int(stamped["diff"]["after"]["mtime"])
    with pytest.raises(ModuleError, match="Error while obtaining timestamp for time yesterday"):
        call({"path": str(path), "modification_time": "yesterday"})


def test_mode_forms(tmp_path):
    path = tmp_path / "f"
    path.write_text("x")
    os.chmod(path, 0o644)
    assert call({"path": str(path), "mode": 0o600})["mode"] == "0600"  # the number YAML makes of 0600
    assert call({"path": str(path), "mode": "u+x,g=u,o=r"})["mode"] == "0774"
    assert call({"path": str(path), "mode": "640"})["mode"] == "0640"
    with pytest.raises(ModuleError, match="mode must be in octal or symbolic form"):
        call({"path": str(path), "mode": "rw-r--r--"})
    with pytest.raises(ModuleError, match="out of range"):
        call({"path": str(path), "mode": 0o17777})


def test_state_defaults_to_what_is_there(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to("d")
    assert call({"path": str(tmp_path / "d")})["state"] == "directory"
    assert call({"path": str(tmp_path / "l")})["state"] == "link"
    with pytest.raises(ModuleError, match=r"file \(.*/nope\) is absent, cannot continue"):
        call({"path": str(tmp_path / "nope")})
    assert call({"path": str(tmp_path / "new"), "recurse": True})["state"] == "directory"


def test_aliases_and_a_missing_path(tmp_path):
    assert call({"dest": str(tmp_path / "a"), "state": "directory"})["path"] == str(tmp_path / "a")
    assert call({"name": str(tmp_path / "b"), "state": "directory"})["path"] == str(tmp_path / "b")
    with pytest.raises(ModuleError, match="^missing required arguments: path$"):  # Ansible's words exactly
        call({"state": "directory"})
    with pytest.raises(ModuleError, match="keep one of them"):
        call({"path": str(tmp_path / "a"), "dest": str(tmp_path / "b"), "state": "directory"})


def test_links(tmp_path):
    (tmp_path / "f").write_text("x")
    res = call({"path": str(tmp_path / "l"), "state": "link", "src": "f"})
    assert res["changed"] and os.readlink(tmp_path / "l") == "f" and res["src"] == "f" and res["state"] == "link"
    assert call({"path": str(tmp_path / "l"), "state": "link", "src": "f"})["changed"] is False
    with pytest.raises(ModuleError, match="refusing to convert from file to symlink"):
        call({"path": str(tmp_path / "f"), "state": "link", "src": "l"})
    dangling = call({"path": str(tmp_path / "d"), "state": "link", "src": "later", "force": True}, warnings=True)
    assert dangling["changed"] and "non-existent symlink target" in dangling["warnings"][0]
    hard = call({"path": str(tmp_path / "h"), "state": "hard", "src": str(tmp_path / "f")})
    assert hard["state"] == "hard" and (tmp_path / "h").stat().st_ino == (tmp_path / "f").stat().st_ino


def test_relative_paths_are_taken_from_the_working_folder(tmp_path, monkeypatch):
    """As Ansible's module: a relative path names a place under the process's working folder."""
    monkeypatch.chdir(tmp_path)
    assert call({"path": "rel", "state": "directory"})["changed"] and (tmp_path / "rel").is_dir()
    (tmp_path / "there").write_text("x")
    call({"path": "h", "state": "hard", "src": "there"})
    assert (tmp_path / "h").stat().st_ino == (tmp_path / "there").stat().st_ino
    assert call({"path": "rel", "state": "absent"})["changed"] and not (tmp_path / "rel").exists()
    with pytest.raises(ModuleError, match="contains '..'"):
        call({"path": "../x", "state": "directory"})


def test_a_relative_path_naming_a_home_or_system_folder_is_refused(tmp_path, monkeypatch):
    """The resolved place is what managed_path judges: `tmp` from / is /tmp, never deleted."""
    monkeypatch.chdir("/")
    with pytest.raises(ModuleError, match="system or home folder"):
        call({"path": "tmp", "state": "absent"})
    assert os.path.isdir("/tmp")


def test_a_folder_the_tool_cannot_own_is_not_replaced_by_a_link(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for check in (True, False):
        with pytest.raises(ModuleError, match="system or home folder"):
            call({"path": str(home), "state": "link", "src": str(tmp_path), "force": True}, check=check)
    assert home.is_dir() and not home.is_symlink()


def test_a_links_target_that_is_a_system_folder_keeps_its_mode(tmp_path):
    link = tmp_path / "l"
    link.symlink_to("/tmp")
    mode = mode_of(Path("/tmp"))
    with pytest.raises(ModuleError, match="system or home folder"):
        call({"path": str(link), "state": "link", "src": "/tmp", "mode": "0700"}, check=True)
    with pytest.raises(ModuleError, match="system or home folder"):
        call({"path": str(link), "state": "directory", "mode": "0700"}, check=True)
    assert mode_of(Path("/tmp")) == mode


def test_recurse_without_follow_leaves_a_links_target_outside_alone(tmp_path):
    top = tmp_path / "top"
    (top / "sub").mkdir(parents=True)
    (top / "sub" / "f").write_text("x")
    os.chmod(top / "sub" / "f", 0o644)
    outside = tmp_path / "outside"
    outside.write_text("y")
    os.chmod(outside, 0o644)
    (top / "out").symlink_to(outside)
    args = {"path": str(top), "state": "directory", "recurse": True, "mode": "u=rwX,g=rX,o=", "follow": False}
    res = call(args)
    assert res["changed"] and mode_of(top) == mode_of(top / "sub") == 0o750 and mode_of(top / "sub" / "f") == 0o640
    assert mode_of(outside) == 0o644
    assert call(args)["changed"] is False


def test_recurse_with_follow_sets_a_links_target_and_a_linked_folders_content(tmp_path):
    """As Ansible's (follow is its default): the targets outside top change too, a loop ends the walk."""
    top, folder = tmp_path / "top", tmp_path / "linked"
    top.mkdir()
    folder.mkdir()
    (folder / "foo").write_text("x")
    (tmp_path / "file").write_text("y")
    for path in (folder, folder / "foo", tmp_path / "file"):
        os.chmod(path, 0o700)
    (top / "to_file").symlink_to("../file")
    (top / "to_dir").symlink_to("../linked")
    (folder / "back").symlink_to("../top")
    (top / "dangling").symlink_to("nowhere")
    args = {"path": str(top), "state": "directory", "recurse": True, "mode": "a-x"}
    assert call(args)["changed"]
    assert mode_of(tmp_path / "file") == mode_of(folder) == mode_of(folder / "foo") == 0o600
    assert call(args)["changed"] is False


def test_recurse_with_follow_never_changes_a_home_folder(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    os.chmod(home, 0o755)
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "top").mkdir()
    (tmp_path / "top" / "h").symlink_to(home)
    with pytest.raises(ModuleError, match="system or home folder"):
        call({"path": str(tmp_path / "top"), "state": "directory", "recurse": True, "mode": "0700"})
    assert mode_of(home) == 0o755


def test_diff_is_ansibles_and_only_with_diff(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "f").write_text("x")
    res = call({"path": str(tmp_path / "d"), "state": "absent", "recurse": True}, diff=True)
    assert res["diff"]["before"]["state"] == "directory" and res["diff"]["after"]["state"] == "absent"
    assert res["diff"]["before"]["path_content"] == {"directories": [str(tmp_path / "d" / "sub")],
                                                     "files": [str(tmp_path / "d" / "sub" / "f")]}
    made = call({"path": str(tmp_path / "e"), "state": "directory", "mode": "0700"})
    assert "diff" not in made


def test_an_unknown_owner_warns_in_check_mode_and_fails_where_it_applies(tmp_path):
    res = call({"path": str(tmp_path / "new"), "state": "directory", "owner": "dfp-no-such-user"}, check=True,
               warnings=True)
    assert res["changed"] and res["warnings"] == [
        "failed to look up user dfp-no-such-user. Create user up to this point in real play"]
    with pytest.raises(ModuleError, match="chown failed: failed to look up user dfp-no-such-user"):
        call({"path": str(tmp_path), "state": "directory", "owner": "dfp-no-such-user"})


def test_bad_option_combinations_are_refused_with_ansibles_words(tmp_path):
    with pytest.raises(ModuleError, match="recurse option requires state to be 'directory'"):
        call({"path": str(tmp_path), "state": "file", "recurse": True})
    with pytest.raises(ModuleError, match="src option requires state to be 'link' or 'hard'"):
        call({"path": str(tmp_path), "state": "directory", "src": "/x"})
    with pytest.raises(ModuleError, match="^src is required for creating new symlinks$"):
        call({"path": str(tmp_path / "l"), "state": "link"})
    with pytest.raises(ModuleError, match="^src is required for creating new hardlinks$"):
        call({"path": str(tmp_path / "h"), "state": "hard"})
    with pytest.raises(ModuleError, match="^src does not exist$") as missing:  # before a relative src is refused
        call({"path": str(tmp_path / "h"), "state": "hard", "src": "dfp-no-such-file.txt"})
    assert missing.value.data == {"src": "dfp-no-such-file.txt", "dest": str(tmp_path / "h")}
