"""What the test files share: running a playbook as the CLI runs it, a playbook of a few roles, and builds kept
apart from this machine's own pip and uv configuration."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from engine.api import run_playbook

ROOT = Path(__file__).resolve().parent.parent

# This machine's package configuration (find-links, local indexes, an active venv) must not help or hinder a
# host's build in a test: the tests set what they need themselves.
PIP_VARS = ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT", "UV_INDEX_URL",
            "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_INDEX", "UV_DEFAULT_INDEX", "VIRTUAL_ENV")


def isolate_pip(monkeypatch) -> None:
    """No pip configuration file and none of PIP_VARS for the rest of the test."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in PIP_VARS:
        monkeypatch.delenv(var, raising=False)


def play(book: str | Path, inventory: str | Path, tmp_path: Path | None = None, **kw):
    """run_playbook as `invoke` runs it (with the report sections the CLI registers) on a project playbook named
    by its name ("provision"), a playbook file, or playbook text (written into tmp_path first)."""
    from dfp_cli import rebuild_report  # the section the CLI registers for the nightly rebuild's reports

    if isinstance(book, str) and "\n" in book:
        if tmp_path is None:
            raise ValueError("playbook text needs tmp_path to be written into")
        path = tmp_path / "play.yaml"
        path.write_text(book)
        book = path
    elif isinstance(book, str) and "/" not in book and not book.endswith(".yaml"):
        book = ROOT / "playbooks" / f"{book}.yaml"
    kw.setdefault("report_sections", {rebuild_report.NAME: rebuild_report})
    return run_playbook(str(book), inventory=str(inventory), **kw)


def play_roles(tmp_path: Path, inventory: str | Path, roles: list, **kw):
    """A playbook of just these roles (common's defaults first) over `inventory`; the engine's RunResult."""
    book = ("- name: roles\n  hosts: all\n  gather_facts: false\n"
            "  pre_tasks: [{import_role: {name: common, tasks_from: variables}}]\n"
            "  roles: [" + ", ".join(roles) + "]\n")
    return play(book, inventory, tmp_path, **kw)


BENCH_ANSIBLE_BIN = Path.home() / ".cache" / "dflash-provision" / "bench" / "venvs" / "ansible" / "bin"


def ansible_tool(name: str) -> Path | None:
    """An ansible-core tool (ansible-playbook, ansible-inventory, ansible-vault): on PATH, beside this python (a
    venv with ansible-core), or in the benchmark's Ansible venv."""
    for cand in [shutil.which(name), Path(sys.executable).parent / name, BENCH_ANSIBLE_BIN / name]:
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    return None


def required_ansible_tool(name: str) -> Path:
    """The tool for a test that compares with real Ansible; the test fails without it (ansible-core is in
    requirements-test.txt, so a missing tool is a broken test environment, not a reason to pass)."""
    import pytest

    tool = ansible_tool(name)
    if tool is None:
        pytest.fail(f"{name} not found: pip install -r requirements-test.txt (ansible-core)")
    return tool


def daemon_pid(folder: Path) -> int | None:
    """The PID of the kept-connection daemon whose socket folder is `folder` (engine/connection/persist.py), if one runs."""
    found = list(folder.glob("*.pid")) if folder.is_dir() else []
    return int(found[0].read_text()) if found else None


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether the process ended (or is a zombie) within `timeout` seconds."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def install_uv(tool: Path) -> str:
    """A real uv in `tool`, installed the way the modules do it (pip --target into a tool folder), this machine's
    pip configuration kept out; the uv binary's path."""
    import pytest

    from dflash_host.env.installers import bootstrap_uv

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_CONFIG_FILE", os.devnull)
        mp.delenv("PIP_FIND_LINKS", raising=False)
        uv, why = bootstrap_uv(str(tool), sys.executable, [], timeout=300)
    assert uv, f"uv could not be installed from PyPI: {why}"
    return uv
