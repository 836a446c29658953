"""atomic_write (dflash_host/host/files.py) keeps a replaced file's extended attributes, its POSIX ACLs among
them, as Ansible's atomic_move does (ansible-core's lineinfile target checks it with setfacl/getfacl)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dflash_host.host.files import atomic_write


def test_a_replaced_file_keeps_its_acl(tmp_path):
    if not shutil.which("setfacl"):
        pytest.skip("no setfacl here")
    f = tmp_path / "t.txt"
    f.write_text("TEST")
    f.chmod(0o644)
    if subprocess.run(["setfacl", "-m", "nobody:rwx", str(f)], capture_output=True).returncode:
        pytest.skip("this filesystem takes no ACLs")
    atomic_write(str(f), b"UPDATE\n")
    lines = subprocess.run(["getfacl", str(f)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert f.read_bytes() == b"UPDATE\n"
    assert "user:nobody:rwx" in lines and "user::rw-" in lines


def test_a_plain_file_is_replaced_as_before(tmp_path):
    f = tmp_path / "plain"
    f.write_bytes(b"a")
    f.chmod(0o600)
    atomic_write(str(f), b"b")
    assert f.read_bytes() == b"b" and f.stat().st_mode & 0o777 == 0o600


def test_a_backup_keeps_the_old_files_owner_and_group(tmp_path):
    import os
    if os.geteuid() != 0:
        pytest.skip("only root gives a file to another user")
    f = tmp_path / "t.txt"
    f.write_text("OLD")
    os.chown(f, 65534, 65534)
    backup = atomic_write(str(f), b"NEW\n", backup=True)
    assert backup and open(backup).read() == "OLD"
    assert (os.stat(backup).st_uid, os.stat(backup).st_gid) == (65534, 65534)
