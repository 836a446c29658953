"""--report and --junit paths are checked before any host is touched; a report is written whole or not at all,
and a write that fails (a full disk) is one paragraph with its own exit code (5), after the run's recap."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.cli.helpers import assert_refused, invoke, write_play


@pytest.mark.parametrize("flag, where", [("--report", "/nonexistent/r.json"), ("--junit", "DIR"), ("--report", "/dev/null")])
def test_a_report_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, flag, where):
    pb, inv, marker = write_play(tmp_path, [])
    path = str(tmp_path) if where == "DIR" else where
    code, out = invoke("play", str(pb), "-i", str(inv), flag, path)
    assert_refused(code, out, marker, flag, "Nothing was run")
    assert len(out.strip().splitlines()) == 1, out


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs, filled: a real full disk (root only)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)]).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        subprocess.run(["dd", "if=/dev/zero", f"of={mnt / 'filler'}", "bs=4k"], capture_output=True)  # until ENOSPC
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_report_that_does_not_fit_is_exit_5_and_leaves_no_empty_file(tmp_path, full_disk):
    pb, inv, marker = write_play(tmp_path, [{"name": "talk", "debug": {"msg": "x" * 200_000}}])
    code, out = invoke("play", str(pb), "-i", str(inv), "--report", str(full_disk / "r.json"))
    assert code == 5, out
    assert "Traceback" not in out and "writing the JSON report failed" in out and "PLAY RECAP" in out
    assert marker.exists()  # the run itself happened
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no empty or partial report, no temp file
