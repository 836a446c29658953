"""The variables Ansible's template action gives the render (engine/run/actions/template_vars.py): ansible_managed
(the default, and ansible.cfg's with {file}/{uid}/{host} and strftime) and the template_* names, compared with
real ansible-playbook writing the same template on a local host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

TEMPLATE = ("{{ ansible_managed }}|{{ template_path }}|{{ template_destpath }}|{{ template_uid }}|"
            "{{ template_host }}|{{ template_fullpath }}|{{ template_mtime.year }}|{{ template_run_date.year }}\n")


def _book(tmp_path: Path, tool: str, extra_vars: dict) -> tuple[Path, Path]:
    out = tmp_path / f"{tool}.out"
    play = {"hosts": "all", "gather_facts": False, "vars": extra_vars,
            "tasks": [{"template": {"src": "t.j2", "dest": str(out)}}]}
    book = tmp_path / f"{tool}.yaml"
    book.write_text(yaml.safe_dump([play]))
    return book, out


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h": {"ansible_connection": "local",
                                                           "ansible_python_interpreter": sys.executable}}}}))
    return inv


def _both(tmp_path: Path, monkeypatch, cfg: str | None, extra_vars: dict) -> tuple[str, str]:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "t.j2").write_text(TEMPLATE)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / ".tmp")}
    if cfg is not None:
        (tmp_path / "managed.cfg").write_text(f"[defaults]\nansible_managed = {cfg}\n")
        env["ANSIBLE_CONFIG"] = str(tmp_path / "managed.cfg")
        monkeypatch.setenv("ANSIBLE_CONFIG", env["ANSIBLE_CONFIG"])
    else:
        monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "none.cfg"))
        env["ANSIBLE_CONFIG"] = str(tmp_path / "none.cfg")
    book, theirs = _book(tmp_path, "ansible", extra_vars)
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(_inventory(tmp_path)), str(book)],
                          env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    book, ours = _book(tmp_path, "ours", extra_vars)
    assert run_playbook(str(book), inventory=str(_inventory(tmp_path))).exit_code == 0
    return theirs.read_text().replace("ansible.out", "TOOL.out"), ours.read_text().replace("ours.out", "TOOL.out")


@pytest.mark.parametrize("cfg", [None, "managed: {file} by {uid} on {host} in %Y"])
def test_template_variables_are_ansibles(tmp_path, monkeypatch, cfg):
    theirs, ours = _both(tmp_path, monkeypatch, cfg, {})
    assert ours == theirs


def test_a_plays_ansible_managed_wins(tmp_path, monkeypatch):
    theirs, ours = _both(tmp_path, monkeypatch, None, {"ansible_managed": "mine"})
    assert ours == theirs and ours.startswith("mine|")
