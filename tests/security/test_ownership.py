"""What the tool deletes, renames, rotates or chmods must be provably its own.

Every hostile case runs the real module (or the real role through the engine) on real files in a temp
folder: a vllm_log pointed at somebody else's file, foreign files named like rotated logs, dfp_root set
to an existing 0700 or 1777 folder, `file: state=absent` pointed at `/`, the home folder, a relative
path naming the home or a path with `..`, and launch files or a unit that the tool did not write. The dangerous targets
are look-alikes inside the temp folder (a fake $HOME, `x/../y`, the home's relative name from a temp cwd); `/` and
system folders are asked in check mode first, and for real only once the guard has refused them.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from dflash_host.host.paths import managed_path
from dflash_host.module import Context, ModuleError, execute
from dflash_host.vllm.log import marker_line, rotate, rotated_files
from engine.api import run_playbook
from library import vllm_server
from tests.fakes.vllm_processes import free_port, kill_leftovers
from tests.helpers import play
from tests.library._helpers import load_module
from tests.roles.test_vllm_service_role import RENDER, START, host_vars, msgs, one

ROOT = Path(__file__).resolve().parents[2]
FILE = load_module("file")
FOREIGN = "somebody else's notes: keep me\n"


def umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def tool_log(path: Path, text: str = "server output\n", pid: int = 999999999) -> Path:
    """A log as the tool writes it: the start marker first (a PID beyond pid_max: no live process)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(marker_line(pid, "abc123def456") + "\n" + text)
    return path


def run_file(args: dict, check: bool = False) -> dict:
    return execute(FILE.ARGS, FILE.run, args, Context(check=check), "file")


def run_server(args: dict, check: bool = False) -> dict:
    result = execute(vllm_server.ARGS, vllm_server.run, args, Context(check=check), "vllm_server")
    return json.loads(json.dumps(result, default=str))


def tree(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() and not p.is_symlink() else None for p in root.rglob("*")}


# --------------------------------------------------------------------------- log rotation (dflash_host.vllm.log)


def test_rotation_refuses_a_log_outside_dfp_root_and_leaves_it_untouched(tmp_path):
    foreign = tmp_path / "elsewhere" / "vllm.log"
    foreign.parent.mkdir()
    foreign.write_text(FOREIGN)
    (tmp_path / "dflash").mkdir()
    before = tree(tmp_path)
    with pytest.raises(ModuleError) as err:
        rotate(str(foreign), keep=0, root=str(tmp_path / "dflash"))
    assert "vllm_log" in err.value.msg and "not inside dfp_root" in err.value.msg
    assert tree(tmp_path) == before


def test_a_foreign_live_log_is_left_alone_and_reported(tmp_path):
    log = tmp_path / "logs" / "vllm.log"
    log.parent.mkdir()
    log.write_text(FOREIGN)
    before = tree(tmp_path)
    with pytest.raises(ModuleError) as err:
        rotate(str(log), keep=0)
    assert str(log) in err.value.msg and "start marker" in err.value.msg and "left untouched" in err.value.msg
    assert tree(tmp_path) == before


def test_log_keep_0_prunes_only_the_tools_rotated_logs(tmp_path):
    logs = tmp_path / "logs"
    log = tool_log(logs / "vllm.log", "current\n")
    ours = tool_log(logs / "vllm.log.20250101-000000", "older run\n")
    lookalikes = [logs / "vllm.log.20200101-000000", logs / "vllm.log.20200101-000000.1"]
    for p in lookalikes:
        p.write_text(FOREIGN)
    elsewhere = tool_log(tmp_path / "elsewhere" / "kept.log")  # carries a marker, but is not beside the log
    link = logs / "vllm.log.20200102-000000"
    link.symlink_to(elsewhere)
    res = rotate(str(log), keep=0)
    assert not log.exists() and not ours.exists() and res["rotated_to"] in res["removed"]
    assert all(p.read_text() == FOREIGN for p in lookalikes)
    assert link.is_symlink() and elsewhere.read_text().endswith("server output\n")
    assert sorted(res["foreign"]) == sorted(str(p) for p in [*lookalikes, link])
    assert sorted(rotated_files(str(log))) == sorted(res["foreign"])


def test_an_empty_foreign_file_is_not_deleted_when_another_user_owns_it(tmp_path):
    log = tmp_path / "logs" / "vllm.log"
    log.parent.mkdir()
    log.write_text("")
    os.chown(log, 12345, 12345)
    with pytest.raises(ModuleError):
        rotate(str(log), keep=3)
    assert log.exists() and log.stat().st_uid == 12345


@pytest.mark.parametrize("kind", ["relative", "dotdot"])
def test_rotation_refuses_relative_and_dotdot_log_paths(tmp_path, monkeypatch, kind):
    (tmp_path / "logs").mkdir()
    monkeypatch.chdir(tmp_path / "logs")
    tool_log(tmp_path / "logs" / "vllm.log")
    path = "vllm.log" if kind == "relative" else f"{tmp_path}/logs/../logs/vllm.log"
    before = tree(tmp_path)
    with pytest.raises(ModuleError) as err:
        rotate(path, keep=0)
    assert ("relative" if kind == "relative" else "'..'") in err.value.msg
    assert tree(tmp_path) == before


def test_managed_path_refuses_the_places_no_tool_owns(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    for path in ["/", "/usr", "/etc", "/tmp", str(tmp_path / "home"), "~", "rel/x", f"{tmp_path}/a/../b"]:
        with pytest.raises(ModuleError):
            managed_path(path, "path")
    with pytest.raises(ModuleError):
        managed_path(str(tmp_path / "x"), "path", root="/")  # a root of / would make everything the tool's
    with pytest.raises(ModuleError):
        managed_path(str(tmp_path), "path")  # an ancestor of the home folder
    assert managed_path(str(tmp_path / "dflash" / "logs"), "path", root=str(tmp_path / "dflash"))


# --------------------------------------------------------------------------- vllm_server


@pytest.fixture
def models(tmp_path):
    target, drafter = tmp_path / "dflash" / "models" / "target", tmp_path / "dflash" / "models" / "dflash"
    for d, arch in ((target, "Qwen3ForCausalLM"), (drafter, "DFlashDraftModel")):
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"architectures": [arch]}))
    return target, drafter


def render_args(tmp_path: Path, models, **over) -> dict:
    root = tmp_path / "dflash"
    args = {
        "state": "rendered",
        "root": str(root),
        "pidfile": str(root / "run" / "vllm.pid"),
        "log": str(root / "logs" / "vllm.log"),
        "venv_python": sys.executable,
        "target_model": str(models[0]),
        "drafter_model": str(models[1]),
        "port": free_port(),
        "flavor": "cpu",
        "num_speculative_tokens": 3,
        "use_systemd": False,
    }
    args.update(over)
    return args


@pytest.mark.parametrize("field", ["log", "pidfile"])
def test_render_refuses_a_log_or_pidfile_outside_dfp_root_and_writes_nothing(tmp_path, models, field):
    outside = tmp_path / "elsewhere" / ("vllm.log" if field == "log" else "vllm.pid")
    res = run_server(render_args(tmp_path, models, **{field: str(outside)}))
    assert res["failed"] and "not inside dfp_root" in res["msg"], res["msg"]
    assert ("vllm_log" if field == "log" else "vllm_pidfile") in res["msg"]
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "dflash" / "run").exists()


def test_render_refuses_to_overwrite_a_unit_it_did_not_write(tmp_path, models):
    units = tmp_path / "units"
    units.mkdir()
    unit = units / "dflash-vllm.service"
    unit.write_text("[Service]\nExecStart=/usr/sbin/somebody-elses-daemon\n")
    res = run_server(render_args(tmp_path, models, use_systemd=True, systemd_present=True, unit_dir=str(units)))
    assert res["failed"] and str(unit) in res["msg"] and "vllm_service_name" in res["msg"], res["msg"]
    assert unit.read_text().startswith("[Service]\nExecStart=/usr/sbin/somebody-elses-daemon")
    assert not (tmp_path / "dflash" / "run").exists()


def test_absent_removes_only_the_files_the_tool_wrote(tmp_path, models):
    assert not run_server(render_args(tmp_path, models))["failed"]
    run = tmp_path / "dflash" / "run"
    launch = json.loads((run / "vllm.launch.json").read_text())
    # a unit path that is not the tool's service name, and an environment file somebody replaced
    foreign_unit = tmp_path / "units" / "sshd.service"
    foreign_unit.parent.mkdir()
    foreign_unit.write_text("# Managed by dflash-provision (but named like another service)\n[Service]\n")
    launch.update(unit_path=str(foreign_unit), mode="process")
    (run / "vllm.launch.json").write_text(json.dumps(launch))
    (run / "vllm.env").write_text("MY_OWN=1\n")
    (run / "vllm.running.json").write_text("not a record of ours\n")
    res = run_server({"state": "absent", "pidfile": str(run / "vllm.pid")})
    assert not res["failed"], res["msg"]
    assert not (run / "vllm.launch.json").exists()
    assert (run / "vllm.env").read_text() == "MY_OWN=1\n" and foreign_unit.exists()
    assert (run / "vllm.running.json").read_text() == "not a record of ours\n"
    assert sorted(res["foreign"]) == sorted([str(run / "vllm.env"), str(run / "vllm.running.json"), str(foreign_unit)])
    assert any("alone: not written by dflash-provision" in w for w in res["warnings"])


def test_absent_refuses_launch_files_outside_the_recorded_root(tmp_path, models):
    assert not run_server(render_args(tmp_path, models))["failed"]
    run = tmp_path / "dflash" / "run"
    other = tmp_path / "other"
    other.mkdir()
    for name in ("vllm.launch.json", "vllm.env"):
        (other / name).write_bytes((run / name).read_bytes())
    res = run_server({"state": "absent", "pidfile": str(other / "vllm.pid")})
    assert res["failed"] and "not inside dfp_root" in res["msg"], res["msg"]
    assert sorted(os.listdir(other)) == ["vllm.env", "vllm.launch.json"]


# --------------------------------------------------------------------------- file module


@pytest.mark.parametrize("kind", ["dotdot", "relative", "home"])
def test_file_absent_refuses_look_alikes_of_dangerous_paths(tmp_path, monkeypatch, kind):
    for d in ("x", "y", "home"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "precious").write_text(FOREIGN)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    path = {"dotdot": f"{tmp_path}/x/../y", "relative": "home", "home": "~"}[kind]  # relative: the home, from cwd
    before = tree(tmp_path)
    res = run_file({"path": path, "state": "absent", "recurse": True})
    assert res["failed"] and "the tool only changes its own files" in res["msg"], res["msg"]
    assert tree(tmp_path) == before


@pytest.mark.parametrize("path", ["/usr", "/etc", "/var/lib", "/home", "/tmp", "/"])
def test_file_absent_refuses_system_folders_and_root(path):
    res = run_file({"path": path, "state": "absent", "recurse": True}, check=True)
    assert res["failed"] and "system or home folder" in res["msg"], res["msg"]
    if path == "/":  # the guard refused in check mode: now the real call, which must refuse the same way
        res = run_file({"path": "/", "state": "absent", "recurse": True})
        assert res["failed"] and "system or home folder" in res["msg"]


def test_file_absent_still_removes_a_folder_of_its_own(tmp_path):
    victim = tmp_path / "dflash" / "venv"
    (victim / "envs").mkdir(parents=True)
    (victim / "envs" / "a").write_text("x")
    res = run_file({"path": str(victim), "state": "absent", "recurse": True})
    assert res["changed"] and not res["failed"] and not victim.exists()


def test_file_refuses_to_chmod_a_system_folder(tmp_path):
    res = run_file({"path": "/tmp", "state": "directory", "mode": "0755"}, check=True)
    assert res["failed"] and "system or home folder" in res["msg"], res["msg"]
    assert mode_of(Path("/tmp")) & stat.S_ISVTX


def test_file_directory_keeps_the_mode_of_an_existing_folder_and_creates_new_ones_0755(tmp_path):
    existing = tmp_path / "private"
    existing.mkdir(mode=0o700)
    os.chmod(existing, 0o700)
    res = run_file({"path": str(existing / "a" / "b"), "state": "directory"})
    assert res["changed"] and mode_of(existing) == 0o700
    assert mode_of(existing / "a") == mode_of(existing / "a" / "b") == 0o755 & ~umask()
    assert not run_file({"path": str(existing), "state": "directory"})["changed"] and mode_of(existing) == 0o700


# --------------------------------------------------------------------------- roles through the engine

COMMON = "- name: common\n  hosts: all\n  roles:\n    - common\n"
SERVICE = "- name: vllm service\n  hosts: all\n  roles:\n    - common\n    - vllm-service\n"


@pytest.mark.parametrize("mode", [0o700, 0o1777])
def test_common_role_keeps_the_mode_of_an_existing_dfp_root(tmp_path, inventory_file, mode):
    root = tmp_path / "dflash"
    root.mkdir()
    os.chmod(root, mode)
    inv = inventory_file(local=True, host_vars={"local": {"dfp_root": str(root), "nvidia_smi": "/nonexistent/nvidia-smi"}})
    res = play(COMMON, inv, tmp_path)
    assert res.exit_code == 0, res.tasks
    assert mode_of(root) == mode
    assert mode_of(root / "run") == mode_of(root / "logs") == 0o755 & ~umask()
    os.chmod(root / "logs", 0o750)  # an admin's choice on a folder that exists: kept on the next run
    again = play(COMMON, inv, tmp_path)
    assert again.exit_code == 0 and again.recap["local"]["changed"] == 0 and mode_of(root / "logs") == 0o750


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_vllm_service_role_leaves_a_foreign_log_alone(tmp_path, inventory_file, where):
    hv = host_vars(tmp_path, log_keep=0)
    logs = Path(hv["dfp_root"]) / "logs" if where == "inside" else tmp_path / "elsewhere"
    foreign = logs / "vllm.log"
    logs.mkdir(parents=True)
    foreign.write_text(FOREIGN)
    if where == "outside":
        hv["vllm_log"] = str(foreign)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        res = play(SERVICE, inv, tmp_path)
        assert res.exit_code != 0
        failed = one(res, RENDER, "local")
        assert failed["failed"] and str(foreign) in failed["msg"], msgs(res)
        assert ("not inside dfp_root" if where == "outside" else "start marker") in failed["msg"]
        assert not res.find(START, "local")
        assert os.listdir(logs) == ["vllm.log"] and foreign.read_text() == FOREIGN
    finally:
        assert not kill_leftovers([logs]), "the old code started a server on a foreign log"


def test_vllm_service_role_keeps_the_mode_of_existing_folders(tmp_path, inventory_file):
    hv = host_vars(tmp_path)
    root = Path(hv["dfp_root"])
    cache = tmp_path / "cache"
    for d in (root, root / "logs", root / "run", cache):
        d.mkdir(exist_ok=True)
        os.chmod(d, 0o700)
    hv["vllm_cache_root"] = str(cache)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        res = play(SERVICE, inv, tmp_path)
        assert res.exit_code == 0, msgs(res)
        assert [mode_of(d) for d in (root, root / "logs", root / "run", cache)] == [0o700] * 4
    finally:
        run_playbook(str(ROOT / "playbooks" / "teardown.yaml"), inventory=str(inv))
        assert not kill_leftovers([root / "logs"])
