"""`teardown --purge` and the pruning of old environments delete only what the tool provably built.

Real environments (the venv role through the engine, pip from local wheels), a real stand-in server
(tests/fakes/fake_vllm.py), real folders planted beside them:
- venv_root pointed at a user's folder: everything in it is left, byte for byte, and the purge says what it left;
- venv_root that is /, the home folder, a system folder, relative or with `..`: refused with an error naming
  venv_root, before anything is stopped or removed (the running server keeps serving);
- a purge removes the marked environments, `current`, the lock, the history and the recorded wheelhouse, and
  leaves foreign folders, a folder named like an environment without a marker, a copied environment and a
  symlink to an outside folder holding a marker; a second purge changes nothing;
- pruning (keep N) deletes older marked environments only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.served import PLAYBOOKS, SERVICE, START, msgs, result_of, server_vars
from tests.fakes.vllm_processes import kill_leftovers
from tests.fakes.wheels import simple_wheel
from tests.helpers import play

pytestmark = pytest.mark.usefixtures("clean_pip_config")  # this machine's pip setup stays out

PURGE = "Remove the serving environments the tool built (purge; anything else under venv_root is left and named)"
REFUSE = "Check that venv_root is a folder whose environments the tool may purge, before anything is stopped"
VENV = """\
- name: serving environment
  hosts: all
  pre_tasks:
    - import_role: {name: common, tasks_from: variables}
  roles:
    - venv
"""


@pytest.fixture
def wheelhouse(tmp_path):
    wh = tmp_path / "wheelhouse"
    simple_wheel(wh, "dfp-a", "1.0")
    simple_wheel(wh, "dfp-a", "2.0")
    return wh


def snapshot(folder: Path) -> dict:
    """Every path under folder (symlinks not followed) with its bytes, link target or 'dir'."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(folder))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


def teardown_purge(inv: Path, tmp_path: Path, **extra):
    return play(PLAYBOOKS / "teardown.yaml", inv, tmp_path, extra_vars=dict(extra, teardown_purge=True))


def user_folder(base: Path) -> Path:
    """A user's own folder that happens to have envs/, current, .lock, a history-like file and wheels."""
    data = base / "my-data"
    (data / "envs" / "project").mkdir(parents=True)
    (data / "envs" / "project" / "results.csv").write_text("a,b\n1,2\n")
    fake_env = data / "envs" / "0123456789abcdef"  # named like an environment, but no marker
    (fake_env / "bin").mkdir(parents=True)
    (fake_env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (data / "notes.txt").write_text("my notes\n")
    (data / ".lock").write_text("held by my own script\n")
    (data / ".dfp-envs.json").write_text(json.dumps({"history": ["0123456789abcdef"], "owner": "me"}))
    (data / "wheelhouse").mkdir()
    (data / "wheelhouse" / "mine-1.0-py3-none-any.whl").write_bytes(b"PK")
    os.symlink("envs/project", data / "current")
    return data


def test_purge_with_venv_root_at_a_user_folder_leaves_everything_in_it(tmp_path, inventory_file):
    data = user_folder(tmp_path)
    before = snapshot(data)
    inv = inventory_file(local=True, host_vars={"local": server_vars(tmp_path)})
    res = teardown_purge(inv, tmp_path, venv_root=str(data))
    assert res.exit_code == 0, msgs(res)
    assert snapshot(data) == before
    purge = result_of(res, PURGE, "local")
    assert not purge["changed"] and "nothing under" in purge["msg"]
    assert {str(data / n) for n in ("notes.txt", "envs/project", "envs/0123456789abcdef", "current", ".lock")} <= set(
        purge["left"]
    )


@pytest.mark.parametrize(
    "venv_root, why",
    [
        ("/", "is /"),
        ("~", "home"),
        ("/usr", "system"),
        ("/etc", "system"),
        ("dflash/venv", "relative"),
        ("{tmp}/dflash/../venv", "'..'"),
    ],
)
def test_purge_refuses_a_root_the_tool_cannot_own_and_changes_nothing(tmp_path, inventory_file, venv_root, why):
    hv = server_vars(tmp_path)
    inv = inventory_file(local=True, host_vars={"local": hv})
    try:
        up = play(SERVICE, inv, tmp_path)
        assert up.exit_code == 0, msgs(up)
        pid = result_of(up, START, "local")["pid"]
        res = teardown_purge(inv, tmp_path, venv_root=venv_root.format(tmp=tmp_path))
        assert res.exit_code == 2
        failed = [t for t in res.tasks if t["status"] == "failed"]
        # refused at the host lock (the first thing a run creates) or, for a root that passes there, by the purge check
        assert [t["task"] for t in failed] in ([REFUSE], ["Host lock"]), msgs(res)
        assert "venv_root=" in failed[0]["msg"] and why in failed[0]["msg"] and "\n" not in failed[0]["msg"]
        assert not [t for t in res.tasks if t["status"] == "changed"]
        # nothing changed: the server still runs and serves
        assert result_of(play(SERVICE, inv, tmp_path), START, "local")["pid"] == pid
        with urllib.request.urlopen(f"http://127.0.0.1:{hv['vllm_port']}/health", timeout=5) as answer:
            assert answer.status == 200
    finally:
        play(PLAYBOOKS / "teardown.yaml", inv, tmp_path)
        assert not kill_leftovers([Path(hv["dfp_root"]) / "logs"])


@pytest.mark.parametrize("state", ["present", "absent", "rollback"])
@pytest.mark.parametrize("root", ["/", "/home", "/var/lib", "relative/venv"])
def test_python_env_refuses_such_a_root_in_every_state(tmp_path, root, state):
    from dflash_host.module import Context, execute
    from library import python_env

    args = {"root": root, "state": state, "flavor": "none", "requirements": ["dfp-a"], "python": sys.executable}
    res = execute(python_env.ARGS, python_env.run, args, Context(check=False), "python_env")
    assert res["failed"] and "venv_root=" in res["msg"] and "the tool only changes its own files" in res["msg"]


def build_two_envs(tmp_path: Path, inventory_file, wheelhouse: Path) -> tuple[Path, Path, list]:
    """Two environments built by the venv role (dfp-a 1.0, then 2.0; the first kept for rollback)."""
    root = tmp_path / "dflash" / "venv"
    hv = server_vars(tmp_path)
    hv.update(venv_root=str(root), vllm_flavor="none", venv_installer="pip", wheelhouse=str(wheelhouse))
    inv = inventory_file(local=True, host_vars={"local": hv})
    built = []
    for pin in ("dfp-a==1.0", "dfp-a==2.0"):
        res = play(VENV, inv, tmp_path, extra_vars={"extra_requirements": [pin]})
        assert res.exit_code == 0, msgs(res)
        built.append(result_of(res, "Build the serving environment beside the current one, verify it by import and switch to it", "local")["env"])
    return inv, root, built


def plant_foreign(root: Path, tmp_path: Path, built: list) -> dict:
    """Things under root the tool did not make, some of them made to look like its own."""
    envs = root / "envs"
    (envs / "notmine").mkdir()
    (envs / "notmine" / "data.bin").write_bytes(b"\x00" * 10)
    (envs / "fedcba9876543210").mkdir()  # named like an environment, no marker
    shutil.copytree(envs / built[0], envs / "aaaaaaaaaaaaaaaa", symlinks=True)  # a copy: its marker names another folder
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ".dfp-env.json").write_text(json.dumps({"id": "bbbbbbbbbbbbbbbb", "hash": "bbbbbbbbbbbbbbbb"}))
    (outside / "precious.txt").write_text("keep me\n")
    os.symlink(outside, envs / "bbbbbbbbbbbbbbbb")  # a symlink to an outside folder with a matching marker
    (root / "userfile.txt").write_text("mine\n")
    return {"outside": outside, "left": [envs / "notmine", envs / "fedcba9876543210", envs / "aaaaaaaaaaaaaaaa",
                                          envs / "bbbbbbbbbbbbbbbb", root / "userfile.txt"]}


@pytest.mark.slow
def test_purge_removes_the_environments_the_tool_built_and_nothing_else(tmp_path, inventory_file, wheelhouse):
    inv, root, built = build_two_envs(tmp_path, inventory_file, wheelhouse)
    assert sorted(os.listdir(root / "envs")) == sorted(built)
    planted = plant_foreign(root, tmp_path, built)
    outside_before = snapshot(planted["outside"])
    left_before = {str(p): snapshot(p) if p.is_dir() and not p.is_symlink() else p.read_bytes() if p.is_file() else "link"
                   for p in planted["left"]}

    res = teardown_purge(inv, tmp_path)
    assert res.exit_code == 0, msgs(res)
    purge = result_of(res, PURGE, "local")
    assert purge["changed"] and sorted(purge["left"]) == sorted(str(p) for p in planted["left"]), purge
    for gone in [root / "envs" / b for b in built] + [root / n for n in ("current", ".lock", ".dfp-envs.json", "wheelhouse", ".dfp-wheelhouse")]:
        assert not os.path.lexists(gone), gone
    left_after = {str(p): snapshot(p) if p.is_dir() and not p.is_symlink() else p.read_bytes() if p.is_file() else "link"
                  for p in planted["left"]}
    assert left_after == left_before and snapshot(planted["outside"]) == outside_before
    assert "userfile.txt" in purge["msg"] and "did not make" in purge["msg"]

    again = teardown_purge(inv, tmp_path)
    assert again.exit_code == 0 and not result_of(again, PURGE, "local")["changed"], msgs(again)


def test_pruning_deletes_older_marked_environments_only(tmp_path, wheelhouse):
    from dflash_host.module import Context, execute
    from library import python_env

    root = tmp_path / "venv"

    def build(pin: str) -> dict:
        args = {"root": str(root), "flavor": "none", "requirements": [pin], "wheelhouse": str(wheelhouse),
                "installer": "pip", "python": sys.executable, "keep": 1}
        res = execute(python_env.ARGS, python_env.run, args, Context(check=False), "python_env")
        assert not res["failed"], res["msg"]
        return res

    a = build("dfp-a==1.0")
    (root / "envs" / "notmine").mkdir()
    (root / "envs" / "0000000000000000").mkdir()  # named like an environment, no marker
    b = build("dfp-a==2.0")
    c = build("dfp-a")
    name = {k: Path(v["path"]).name for k, v in (("a", a), ("b", b), ("c", c))}
    assert c["pruned"] == [name["a"]], c
    assert sorted(os.listdir(root / "envs")) == sorted(["notmine", "0000000000000000", name["b"], name["c"]])
    assert any("notmine" in w and "0000000000000000" in w for w in c["warnings"]), c["warnings"]
