"""More of "what the tool deletes, renames or chmods must be provably its own": copy's delete_extra,
gpu_cleanup' stale pidfile, and vllm_server stopping with a pidfile whose PID was reused.

Real modules on real files and real processes in a temp folder. The dangerous targets are look-alikes
inside the temp folder (a fake $HOME, `x/../y`, a relative name in a temp cwd). `/` and real system
folders are only ever asked in check mode, and only after a canary (`/etc`, in check mode) was refused:
on a copy module without the guard, delete_extra would empty them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from dflash_host.host.processes import describe
from dflash_host.module import Context, execute
from library import gpu_cleanup, vllm_server
from tests.library._helpers import load_module

COPY = load_module("copy")
KEEP = b"the one file the manifest lists\n"
FOREIGN = "somebody else's notes: keep me\n"
MANIFEST = [{"path": "keep.txt", "sha256": hashlib.sha256(KEEP).hexdigest(), "mode": "0644"}]


def run(module, args: dict, check: bool = False, name: str = "") -> dict:
    result = execute(module.ARGS, module.run, args, Context(check=check), name or module.__name__)
    return json.loads(json.dumps(result, default=str))


def delete_extra(dest: str, phase: str, check: bool) -> dict:
    args = {"dest": dest, "manifest": MANIFEST, "phase": phase, "delete_extra": True}
    return run(COPY, args, check=check, name="copy")


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink() else None for p in root.rglob("*")}


def refused(res: dict) -> bool:
    return res["failed"] and "delete_extra refused" in res["msg"] and "the tool only changes its own files" in res["msg"]


# --------------------------------------------------------------------------- copy: delete_extra


@pytest.mark.parametrize("kind", ["home", "tilde", "dotdot", "relative", "ancestor of home"])
@pytest.mark.parametrize("phase, check", [("plan", True), ("install", True), ("plan", False), ("install", False)])
def test_copy_delete_extra_refuses_look_alikes_of_dangerous_folders_and_changes_nothing(tmp_path, monkeypatch, kind, phase, check):
    """Before the guard, install deleted every file of the (fake) home, or of y through x/../y."""
    home = tmp_path / "top" / "home"
    for d in (home, tmp_path / "top", tmp_path / "x", tmp_path / "y"):
        d.mkdir(parents=True, exist_ok=True)
        (d / "precious").write_text(FOREIGN)
        (d / "sub").mkdir()
        (d / "sub" / "notes").write_text(FOREIGN)
        (d / "keep.txt").write_bytes(KEEP)  # as listed: install needs no upload and goes straight to deleting
        os.chmod(d / "keep.txt", 0o644)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    dest = {
        "home": str(home),
        "tilde": "~",
        "dotdot": f"{tmp_path}/x/../y",
        "relative": "y",
        "ancestor of home": str(tmp_path / "top"),
    }[kind]
    before = tree(tmp_path)
    res = delete_extra(dest, phase, check)
    assert refused(res), res
    assert tree(tmp_path) == before


def test_copy_delete_extra_refuses_root_and_system_folders_in_check_mode(tmp_path):
    # The canary: without the guard, check mode answers with a plan; stop before / is ever walked.
    if not refused(delete_extra("/etc", "plan", check=True)):
        pytest.fail("copy's delete_extra is not guarded: /etc was planned for deletion (nothing changed)")
    link = tmp_path / "looks-harmless"
    link.symlink_to("/usr")
    for dest in ["/", "/etc", "/usr", "/var/lib", "/home", "/tmp", str(link)]:
        for phase in ("plan", "install"):
            res = delete_extra(dest, phase, check=True)
            assert refused(res) and "system or home folder" in res["msg"], (dest, res)


def test_copy_without_delete_extra_still_writes_into_a_folder_it_does_not_own(tmp_path, monkeypatch):
    """The guard is delete_extra's: copying listed files into a home folder stays allowed."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "precious").write_text(FOREIGN)
    monkeypatch.setenv("HOME", str(home))
    res = run(COPY, {"dest": "~", "manifest": MANIFEST, "phase": "plan"}, name="copy")
    assert not res["failed"] and res["needed"] == ["keep.txt"], res


def test_copy_delete_extra_still_cleans_a_folder_of_its_own(tmp_path):
    dest = tmp_path / "dflash" / "files"
    dest.mkdir(parents=True)
    (dest / "keep.txt").write_bytes(KEEP)
    os.chmod(dest / "keep.txt", 0o644)
    (dest / "stale.txt").write_text("x")
    res = delete_extra(str(dest), "install", check=False)
    assert not res["failed"] and res["deleted"] == ["stale.txt"], res
    assert sorted(os.listdir(dest)) == ["keep.txt"]


# --------------------------------------------------------------------------- gpu_cleanup: stale pidfile


def stale_pidfile(path: Path) -> bytes:
    """A valid record of a process that has exited (a crash left it): gpu_cleanup removes such a file."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        record = describe(psutil.Process(proc.pid))
    finally:
        proc.kill()
        proc.wait()
    record.update(pgid=proc.pid, sid=proc.pid, tree=[])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path.read_bytes()


@pytest.mark.parametrize("kind", ["dotdot", "relative"])
def test_gpu_cleanup_refuses_a_pidfile_path_it_cannot_own_and_keeps_the_file(gpu, tmp_path, monkeypatch, kind):
    """Before the guard the stale pidfile behind `x/../run` or a relative path was unlinked."""
    (tmp_path / "x").mkdir()
    data = stale_pidfile(tmp_path / "run" / "vllm.pid")
    monkeypatch.chdir(tmp_path)
    pidfile = {"dotdot": f"{tmp_path}/x/../run/vllm.pid", "relative": "run/vllm.pid"}[kind]
    args = {"pidfile": pidfile, "nvidia_smi": gpu.nvidia_smi, "device_prefix": gpu.device_prefix, "timeout_s": 5}
    res = run(gpu_cleanup, args, name="gpu_cleanup")
    assert res["failed"] and "pidfile=" in res["msg"] and "the tool only changes its own files" in res["msg"], res
    assert (tmp_path / "run" / "vllm.pid").read_bytes() == data


def test_gpu_cleanup_still_removes_its_own_stale_pidfile(gpu, tmp_path):
    pidfile = tmp_path / "dflash" / "run" / "vllm.pid"
    stale_pidfile(pidfile)
    args = {"pidfile": str(pidfile), "nvidia_smi": gpu.nvidia_smi, "device_prefix": gpu.device_prefix, "timeout_s": 5}
    res = run(gpu_cleanup, args, name="gpu_cleanup")
    assert not res["failed"] and res["pidfile_removed"] == str(pidfile) and not pidfile.exists(), res


# --------------------------------------------------------------------------- vllm_server: a reused PID


@pytest.mark.parametrize("check", [True, False])
def test_stopping_drops_a_pidfile_whose_pid_was_reused_with_a_warning_and_leaves_that_process(tmp_path, check):
    """The pidfile names a live process that is not the server (its start time differs): it is never
    signalled, and the stale pidfile goes with a warning naming the PID (before: silently)."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record = describe(psutil.Process(other.pid))
        # an earlier process with this PID: it started earlier after boot (and an hour earlier by the clock)
        record.update(pgid=other.pid, sid=other.pid, tree=[], start_time=record["start_time"] - 3600,
                      since_boot=record["since_boot"] / 2)
        pidfile = tmp_path / "dflash" / "run" / "vllm.pid"
        pidfile.parent.mkdir(parents=True)
        pidfile.write_text(json.dumps(record))
        res = run(vllm_server, {"state": "stopped", "pidfile": str(pidfile)}, check=check, name="vllm_server")
        assert not res["failed"], res["msg"]
        warned = [w for w in res.get("warnings", []) if f"PID {other.pid}" in w]
        assert warned and "another process" in warned[0] and "left alone" in warned[0], res
        assert other.poll() is None and psutil.Process(other.pid).status() != psutil.STATUS_ZOMBIE
        assert pidfile.exists() == check
    finally:
        os.kill(other.pid, signal.SIGKILL)
        other.wait()
