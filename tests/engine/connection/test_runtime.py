"""The host runtime: dflash_host reaches each host once per version, and the worker runs exactly that version.

Real runs of the engine against the local host, each in its own python process with its own cache folder
(XDG_CACHE_HOME: the control node's and the local worker's), so what lands on the "host" can be listed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from engine.api import run_playbook
from engine.connection import runtime

ROOT = Path(__file__).resolve().parents[3]
RUN = (
    "import json, sys\n"
    "from engine.api import run_playbook\n"
    "res = run_playbook(sys.argv[1], inventory=sys.argv[2])\n"
    "print(json.dumps({'exit': res.exit_code, 'msgs': [r.msg for r in res.find('Look at /')]}))\n"
)


def _files(tmp_path: Path) -> tuple[Path, Path]:
    playbook = tmp_path / "pb.yaml"
    playbook.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [{"name": "Look at /", "stat": {"path": "/"}}]}]))
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"local": {"ansible_connection": "local"}}}}))
    return playbook, inventory


def _run_from(tree: Path, playbook: Path, inventory: Path, cache: Path) -> dict:
    """A run of the engine found in `tree` (a checkout), with `cache` as the user's cache folder."""
    proc = subprocess.run(
        [sys.executable, "-c", RUN, str(playbook), str(inventory)],
        cwd=tree,
        env=dict(os.environ, XDG_CACHE_HOME=str(cache)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _runtimes(cache: Path) -> list[str]:
    folder = cache / "dflash-provision" / "runtime"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _checkout_with_a_changed_package(tmp_path: Path) -> Path:
    """A copy of engine/, dflash_host/ and library/ whose module contract marks every result's message."""
    tree = tmp_path / "checkout"
    for part in ("engine", "dflash_host", "library"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    contract = tree / "dflash_host" / "module.py"
    text = contract.read_text()
    assert '    result.setdefault("msg", "")\n' in text
    contract.write_text(text.replace('    result.setdefault("msg", "")\n', '    result["msg"] = "[new version] " + result.get("msg", "")\n'))
    return tree


def test_a_changed_package_is_shipped_again_and_each_version_is_kept_apart(tmp_path):
    playbook, inventory = _files(tmp_path)
    cache = tmp_path / "cache"
    first = _run_from(ROOT, playbook, inventory, cache)
    assert first == {"exit": 0, "msgs": ["/ is a directory"]}
    shipped = _runtimes(cache)
    assert len(shipped) == 1 and shipped[0].startswith(runtime.host_package_hash() + "-")

    tree = _checkout_with_a_changed_package(tmp_path)
    second = _run_from(tree, playbook, inventory, cache)
    assert second == {"exit": 0, "msgs": ["[new version] / is a directory"]}  # the host ran the new package
    both = _runtimes(cache)
    assert len(both) == 2 and shipped[0] in both  # the new version beside the old one, under its own key
    new_key = next(k for k in both if k != shipped[0])
    assert (cache / "dflash-provision" / "runtime" / new_key / "dflash_host" / "module.py").read_bytes() == (
        tree / "dflash_host" / "module.py"
    ).read_bytes()

    third = _run_from(ROOT, playbook, inventory, cache)  # back to this checkout: its cached version, not the newer one
    assert third == first and _runtimes(cache) == both


def test_a_dflash_host_in_the_working_folder_does_not_replace_the_shipped_one(tmp_path, monkeypatch):
    """The local worker starts in the control node's working folder (sys.path[0]); a stale copy there is ignored."""
    stale = tmp_path / "work" / "dflash_host"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text('raise ImportError("a stale dflash_host from the working folder was imported")\n')
    (stale / "module.py").write_text('raise ImportError("a stale dflash_host.module from the working folder was imported")\n')
    playbook, inventory = _files(tmp_path)
    monkeypatch.chdir(stale.parent)
    res = run_playbook(str(playbook), inventory=str(inventory))
    assert res.exit_code == 0, res.tasks
    assert [r.msg for r in res.find("Look at /")] == ["/ is a directory"]


def test_a_version_is_made_of_regular_files_only(tmp_path):
    """An editor's dangling lock link (`.#worker.py` -> user@host.pid, as Emacs leaves beside an unsaved file)
    and bytecode are not part of a package's version: reading them would fail or change it for nothing."""
    (tmp_path / "sub" / "__pycache__").mkdir(parents=True)
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "sub" / "b.py").write_text("b = 2\n")
    (tmp_path / "sub" / "__pycache__" / "b.cpython-311.py").write_text("")
    os.symlink("root@host.1234:1700000000", tmp_path / ".#a.py")
    assert runtime._files(tmp_path, ".py") == [tmp_path / "a.py", tmp_path / "sub" / "b.py"]


def test_a_user_without_a_home_caches_in_a_private_temp_folder(tmp_path, monkeypatch):
    """become_user nobody (home /nonexistent): the runtime and code go to a 0700 folder of the user's own in the
    temp folder; one that others may enter, or not a real folder, is never used (its code would be someone else's)."""
    import ast
    import tempfile
    import types

    source = ast.parse((ROOT / "engine" / "connection" / "worker.py").read_text())  # importing it starts a worker
    found = [n for n in source.body if isinstance(n, ast.FunctionDef) and n.name == "cache_base"]
    worker = types.SimpleNamespace()
    namespace: dict = {"os": os}
    exec(compile(ast.Module(body=found, type_ignores=[]), "worker.py", "exec"), namespace)  # noqa: S102 - our own source
    worker.cache_base = namespace["cache_base"]
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "nonexistent" / "home"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    private = tmp_path / f"dflash-provision-cache-{os.getuid()}"
    assert worker.cache_base() == str(private) and (private.stat().st_mode & 0o777) == 0o700
    private.chmod(0o777)
    assert worker.cache_base() == str(tmp_path / "nonexistent" / "home" / ".cache")
    private.rmdir()
    private.symlink_to(tmp_path)
    assert worker.cache_base() == str(tmp_path / "nonexistent" / "home" / ".cache")
