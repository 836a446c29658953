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
    rc, res = cli(tmp_path, {"path": str(f), "checksum": True})
    assert rc == 0 and res["changed"] is False
    assert res["exists"] and res["isfile"] and not res["isdir"] and not res["islink"]
    assert res["size"] == 5 and res["mode"] == "0640" and res["uid"] == os.getuid()
    assert res["sha256"] == hashlib.sha256(b"hello").hexdigest()
    assert abs(res["mtime"] - f.stat().st_mtime) < 1e-3


def test_cli_runs_with_python_s_where_stat_is_not_preloaded(tmp_path):
    """python3 -S does not import the stdlib stat at start-up: run as library.stat, the module never shadows it."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"path": str(tmp_path)}))
    proc = subprocess.run([sys.executable, "-S", "-m", "library.stat", str(args_file)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["isdir"] is True


def test_missing_path_has_every_key_defined(tmp_path):
    res = call({"path": str(tmp_path / "nope"), "checksum": True})
    assert res["exists"] is False and res["changed"] is False
    for key in ("isdir", "isfile", "islink", "size", "mode", "uid", "gid", "mtime", "sha256", "lnk_target"):
        assert key in res
    assert "does not exist" in res["msg"]


def test_path_under_a_file_counts_as_missing(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    assert call({"path": str(f / "child")})["exists"] is False


def test_directory_has_no_checksum(tmp_path):
    res = call({"path": str(tmp_path), "checksum": True})
    assert res["isdir"] is True and res["sha256"] is None


def test_checksum_only_when_asked(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    assert call({"path": str(f)})["sha256"] is None


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


def test_dangling_symlink_exists_as_a_link_but_not_when_followed(tmp_path):
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    assert call({"path": str(link)})["exists"] is True
    followed = call({"path": str(link), "follow": True})
    assert followed["exists"] is False and followed["islink"] is True and "dangling" in followed["msg"]


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
    assert rc == 1 and "missing required argument 'path'" in res["msg"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read anything")
def test_unreadable_file_with_checksum_is_a_clear_error(tmp_path):
    f = tmp_path / "secret"
    f.write_text("x")
    os.chmod(f, 0)
    with pytest.raises(ModuleError, match="cannot read .* for its checksum"):
        call({"path": str(f), "checksum": True})
