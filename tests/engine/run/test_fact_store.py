"""ANSIBLE_CACHE_PLUGIN=jsonfile (engine/run/fact_store.py): a `cacheable` set_fact is there for the next run, a
plain one is not, and --flush-cache forgets it; the same two playbooks pass under real ansible-playbook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import run_playbook
from engine.run import fact_store
from tests.helpers import required_ansible_tool

FIRST = """\
- hosts: all
  gather_facts: false
  tasks:
    - set_fact: {kept_fact: from_first_run, cacheable: true}
    - set_fact: {plain_fact: not_kept}
"""
SECOND = """\
- hosts: all
  gather_facts: false
  tasks:
    - assert: {that: ["kept_fact == 'from_first_run'", "plain_fact is undefined"]}
"""


def _env(tmp_path, folder) -> dict:
    return {"ANSIBLE_CACHE_PLUGIN": "jsonfile", "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(folder),
            "ANSIBLE_CACHE_PLUGIN_PREFIX": "prefix_"}


@pytest.fixture()
def books(tmp_path):
    (tmp_path / "first.yml").write_text(FIRST)
    (tmp_path / "second.yml").write_text(SECOND)
    inv = tmp_path / "inv"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return tmp_path, inv


def test_ansible_playbook_keeps_a_cacheable_fact_for_the_next_run(books):
    folder, inv = books
    tool = str(required_ansible_tool("ansible-playbook"))
    env = {"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(folder),
           "ANSIBLE_LOCAL_TEMP": str(folder / ".tmp"), **_env(folder, folder / "ansible-cache")}
    for book in ("first.yml", "second.yml"):
        proc = subprocess.run([tool, "-i", str(inv), str(folder / book)], capture_output=True, text=True,
                              timeout=300, cwd=folder, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:]


def test_ours_keeps_a_cacheable_fact_and_flush_forgets_it(books, monkeypatch):
    folder, inv = books
    for key, value in _env(folder, folder / "cache").items():
        monkeypatch.setenv(key, value)
    assert run_playbook(folder / "first.yml", inv).exit_code == 0
    assert [p.name for p in (folder / "cache").iterdir()] == ["prefix_h1"]
    second = run_playbook(folder / "second.yml", inv)
    assert second.exit_code == 0, second.tasks
    fact_store.flush()
    forgotten = run_playbook(folder / "second.yml", inv)
    assert forgotten.exit_code == 4 and "'kept_fact' is undefined" in forgotten.error, forgotten.error


def test_an_unknown_cache_plugin_is_one_clear_error(books, monkeypatch):
    folder, inv = books
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN", "redis")
    res = run_playbook(folder / "first.yml", inv)
    assert res.exit_code == 4 and "ANSIBLE_CACHE_PLUGIN='redis'" in res.error, res.error


def test_the_flush_cache_option_forgets_the_kept_facts(books):
    folder, inv = books
    env = {**os.environ, **_env(folder, folder / "cache"), "NO_COLOR": "1"}
    root = Path(__file__).resolve().parents[3]
    for book, flush, code in (("first.yml", (), 0), ("second.yml", (), 0), ("second.yml", ("--flush-cache",), 4)):
        proc = subprocess.run([sys.executable, "-m", "invoke", "play", str(folder / book), "-i", str(inv), *flush],
                              cwd=root, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == code, proc.stdout[-2000:] + proc.stderr[-2000:]
