"""library/stat.py: what is at a path, never a change."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import ROOT, load_module, run_by_hand, run_module

from dflash_host.module import ModuleError

stat_mod = load_module("stat")


def call(args: dict, check: bool = False) -> dict:
    return run_module(stat_mod, args, check=check)


def cli(tmp_path: Path, args: dict, *flags: str) -> tuple[int, dict]:
    return run_by_hand("stat", tmp_path, args, *flags)


def test_cli_reports_a_file_with_checksum(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(b"hello")
    os.chmod(f, 0o640)
    rc, res = cli(tmp_path, {"path": str(f), "checksum": "sha256"})  # Ansible's alias of checksum_algorithm
    assert rc == 0 and res["changed"] is False
    assert res["exists"] and res["isfile"] and not res["isdir"] and not res["islink"]
    assert res["size"] == 5 and res["mode"] == "0640" and res["uid"] == os.getuid()
    assert res["sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert abs(res["mtime"] - f.stat().st_mtime) < 1e-3
    st = res["stat"]
    assert st["exists"] and st["isreg"] and not st["islnk"] and st["mode"] == "0640" and st["size"] == 5
    assert st["checksum"] == res["sha256"] and st["path"] == str(f) and st["inode"] == f.stat().st_ino
    assert (st["rusr"], st["wusr"], st["xusr"], st["rgrp"], st["wgrp"], st["roth"]) == (True, True, False, True,
                                                                                           False, False)


def test_the_stat_key_is_what_ansible_users_read(tmp_path):
    """`register: st` then `st.stat.exists`: Ansible's shape (tests/library/test_stat_against_ansible.py has the rest)."""
    f = tmp_path / "f"
    f.write_bytes(b"x")
    res = call({"path": str(f)})
    assert res["stat"]["checksum"] == hashlib.sha1(b"x").hexdigest()  # noqa: S324 - Ansible's default algorithm
    assert res["sha256"] is None  # the top-level sha256 is the checksum only when it is sha256
    expected = {"exists", "path", "mode", "isdir", "isreg", "islnk", "ischr", "isblk", "isfifo", "issock", "uid",
                "gid", "size", "inode", "dev", "nlink", "atime", "mtime", "ctime", "wusr", "rusr", "xusr", "wgrp",
                "rgrp", "xgrp", "woth", "roth", "xoth", "isuid", "isgid", "readable", "writeable", "executable",
                "pw_name", "gr_name", "checksum", "blocks", "block_size", "device_type", "mimetype", "charset", "version",
                "attributes", "attr_flags"}
    assert set(res["stat"]) == expected
    assert call({"path": str(tmp_path / "nope")})["stat"] == {"exists": False}


@pytest.mark.parametrize("alias", ["dest", "name"])
def test_path_takes_ansibles_aliases(tmp_path, alias):
    res = call({alias: str(tmp_path), "checksum_algo": "md5", "mime": False, "attr": False})
    assert res["path"] == str(tmp_path) and res["stat"]["isdir"]


def test_path_and_an_alias_with_different_values_are_refused(tmp_path):
    with pytest.raises(ModuleError, match="'path' and 'dest' \\(both 'path'\\) are given"):
        call({"path": str(tmp_path), "dest": str(tmp_path / "x")})


def test_our_old_checksum_bool_is_refused_naming_the_argument(tmp_path):
    # converted to the text 'True' as Ansible's str type does, then refused as no algorithm
    with pytest.raises(ModuleError, match="is 'True'; choose one of"):
        call({"path": str(tmp_path), "checksum": True})


@pytest.mark.parametrize("option", ["get_mime", "mime", "mime_type", "mime-type"])
def test_mime_is_the_file_programs_answer_and_off_when_asked(tmp_path, option):
    f = tmp_path / "f.txt"
    f.write_text("plain\n")
    assert "mimetype" not in call({"path": str(f), option: False})["stat"]
    got = call({"path": str(f), option: True})["stat"]
    assert (got["mimetype"], got["charset"]) == ("text/plain", "us-ascii")


def test_mime_without_the_file_program_is_pythons_guess(tmp_path, monkeypatch):
    f = tmp_path / "f.json"
    f.write_text("{}")
    monkeypatch.setenv("PATH", str(tmp_path))  # no `file` program there
    got = call({"path": str(f), "get_attributes": False})["stat"]
    assert (got["mimetype"], got["charset"]) == ("application/json", "unknown")


@pytest.mark.parametrize("option", ["get_attributes", "attr", "attributes"])
def test_attributes_are_lsattrs_and_off_when_asked(tmp_path, option):
    assert "attr_flags" not in call({"path": str(tmp_path), option: False})["stat"]
    got = call({"path": str(tmp_path), option: True})["stat"]
    assert set(got) >= {"version", "attributes", "attr_flags"} and isinstance(got["attributes"], list)


@pytest.mark.parametrize("algorithm", ["md5", "sha1", "sha224", "sha256", "sha384", "sha512"])
def test_every_ansible_algorithm(tmp_path, algorithm):
    f = tmp_path / "f"
    f.write_bytes(b"data")
    assert call({"path": str(f), "checksum_algorithm": algorithm})["stat"]["checksum"] == hashlib.new(
        algorithm, b"data").hexdigest()


def test_an_unknown_algorithm_is_refused(tmp_path):
    with pytest.raises(ModuleError, match="'checksum_algorithm' is 'crc32'; choose one of: md5, sha1"):
        call({"path": str(tmp_path), "checksum_algorithm": "crc32"})


def test_special_files_and_mode_bits(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    fifo = call({"path": str(tmp_path / "fifo")})
    assert fifo["stat"]["isfifo"] and "checksum" not in fifo["stat"] and "special file" in fifo["msg"]
    suid = tmp_path / "suid"
    suid.write_text("x")
    os.chmod(suid, 0o4750)
    st = call({"path": str(suid)})["stat"]
    assert (st["isuid"], st["isgid"], st["mode"], st["xusr"], st["xoth"]) == (True, False, "4750", True, False)
    assert call({"path": "/dev/null"})["stat"]["ischr"] is True


def test_cli_runs_with_python_s_where_stat_is_not_preloaded(tmp_path):
    """python3 -S does not import the stdlib stat at start-up: run as library.stat, the module never shadows it."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"path": str(tmp_path)}))
    proc = subprocess.run([sys.executable, "-S", "-m", "library.stat", str(args_file)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["isdir"] is True


def test_missing_path_has_every_key_defined(tmp_path):
    res = call({"path": str(tmp_path / "nope"), "checksum_algorithm": "sha256"})
    assert res["exists"] is False and res["changed"] is False and res["stat"] == {"exists": False}
    for key in ("isdir", "isfile", "islink", "size", "mode", "uid", "gid", "mtime", "sha256", "lnk_target"):
        assert key in res
    assert "does not exist" in res["msg"]


def test_path_under_a_file_counts_as_missing(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    res = call({"path": str(f / "child")})  # Ansible fails here ("Not a directory"): a named difference
    assert res["exists"] is False and res["stat"] == {"exists": False}


def test_directory_has_no_checksum(tmp_path):
    res = call({"path": str(tmp_path), "checksum": "sha256"})
    assert res["isdir"] is True and res["sha256"] is None and "checksum" not in res["stat"]


def test_no_checksum_with_get_checksum_false(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    res = call({"path": str(f), "get_checksum": False, "checksum_algorithm": "sha256"})
    assert res["sha256"] is None and "checksum" not in res["stat"]


@pytest.mark.parametrize(
    "follow, isdir, islink",
    [(False, False, True), (True, True, True)],
)
def test_symlink_is_described_as_a_link_or_followed(tmp_path, follow, isdir, islink):
    target = tmp_path / "envs" / "abc"
    target.mkdir(parents=True)
    link = tmp_path / "current"
    link.symlink_to("envs/abc")
    res = call({"path": str(link), "follow": follow})
    assert (res["exists"], res["isdir"], res["islink"], res["lnk_target"]) == (
        True,
        isdir,
        islink,
        "envs/abc",
    )
    st = res["stat"]  # Ansible's: the target's when followed, with no link fields
    assert (st["islnk"], st["isdir"], st.get("lnk_target"), st.get("lnk_source")) == (
        (False, True, None, None) if follow else (True, False, "envs/abc", str(target)))


def test_dangling_symlink_exists_as_a_link_but_not_when_followed(tmp_path):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    res = call({"path": str(link)})
    assert res["exists"] is True and res["stat"]["islnk"] and res["stat"]["readable"] is False
    followed = call({"path": str(link), "follow": True})
    assert followed["exists"] is False and followed["islink"] is True and "dangling" in followed["msg"]
    assert followed["stat"] == {"exists": False}


def test_a_link_loop_followed_fails_with_ansibles_words_first(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    assert call({"path": str(tmp_path / "loop")})["stat"]["islnk"] is True
    with pytest.raises(ModuleError, match="^Too many levels of symbolic links: module 'stat' cannot follow"):
        call({"path": str(tmp_path / "loop"), "follow": True})


def test_check_mode_is_the_same_and_changes_nothing(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    before = f.stat()
    assert call({"path": str(f)}, check=True)["exists"] is True
    assert f.stat().st_mtime_ns == before.st_mtime_ns


def test_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "x").write_text("x")
    assert call({"path": "~/x"})["path"] == str(tmp_path / "x")


def test_missing_path_argument_is_a_clear_error(tmp_path):
    rc, res = cli(tmp_path, {})
    assert rc == 1 and res["msg"].startswith("missing required arguments: path; give path (or its alias dest or name)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_an_unreadable_file_is_described_without_a_checksum_as_ansible_does(tmp_path):
    f = tmp_path / "secret"
    f.write_text("x")
    os.chmod(f, 0)
    res = call({"path": str(f), "checksum": "sha256"})
    assert res["stat"]["readable"] is False and "checksum" not in res["stat"] and res["sha256"] is None
    assert "no checksum: this user cannot read it" in res["msg"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can search anything")
def test_a_folder_on_the_way_not_searchable_fails_with_ansibles_words_first(tmp_path):
    shut = tmp_path / "shut"
    shut.mkdir()
    (shut / "f").write_text("x")
    os.chmod(shut, 0)
    try:
        with pytest.raises(ModuleError, match="^Permission denied: module 'stat' cannot look at"):
            call({"path": str(shut / "f")})
    finally:
        os.chmod(shut, 0o755)
