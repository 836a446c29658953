"""dfp_root, venv_root and hf_home must be folders the tool can own: a relative, unnormalised or system path, or
one holding a control character, is refused before the host lock (the first file a run creates) is made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook


def run_with(tmp_path: Path, **roots) -> tuple:
    book = tmp_path / "pb.yaml"
    marker = tmp_path / "marker"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "would change", "file": {"path": str(marker), "state": "directory"}}]}]))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        res = run_playbook(str(book), inventory={"all": {"hosts": {"h": {"ansible_connection": "local", **roots}}}})
    finally:
        os.chdir(old)
    return res, marker, cwd


@pytest.mark.parametrize("roots, needle", [
    ({"dfp_root": "/"}, "is /"),
    ({"dfp_root": "~"}, "home folder"),
    ({"dfp_root": "/etc"}, "system folder"),
    ({"dfp_root": "/etc/cron.d"}, "system folder"),
    ({"dfp_root": "dflash"}, "relative path"),
    ({"dfp_root": "/tmp/x/../etc"}, "contains '..'"),
    ({"dfp_root": "/tmp/./x"}, "not a normalised path"),
    ({"dfp_root": "/tmp/dfp\x00x"}, "control character"),
    ({"venv_root": "venvs"}, "relative path"),
    ({"hf_home": "/usr/bin"}, "system folder"),
])
def test_a_root_the_tool_cannot_own_is_refused_before_anything_is_created(tmp_path, roots, needle):
    res, marker, cwd = run_with(tmp_path, **roots)
    assert res.exit_code == 2
    failed = [t for t in res.tasks if t["status"] == "failed"]
    assert failed and failed[0]["task"] == "Host lock" and needle in failed[0]["msg"], failed
    assert "Nothing was changed" in failed[0]["msg"]
    assert not marker.exists() and not list(cwd.iterdir())  # no lock folder in the working directory either
    assert not Path("/etc/cron.d/.dflash-provision.lock").exists()


def test_a_plain_root_is_fine(tmp_path):
    res, marker, _ = run_with(tmp_path, dfp_root=str(tmp_path / "root"), hf_home="~/hf-test-root")
    assert res.exit_code == 0 and marker.exists()


@pytest.mark.parametrize("name", ["h\x00x", "h\x1b[2Kx", "g\nx", "t\tx"])
@pytest.mark.parametrize("kind", ["host", "group"])
def test_a_name_with_a_control_character_is_refused_at_load(name, kind):
    from engine.errors import UserError
    from engine.inventory.manager import Inventory

    data = {"all": {"hosts": {name: {}}}} if kind == "host" else {"all": {"children": {name: {"hosts": {"a": {}}}}}}
    with pytest.raises(UserError, match="control characters"):
        Inventory(data=data)
