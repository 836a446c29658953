"""copy with `src:` to a dest under `~`: the file lands in the home folder of the user the module runs as, as
Ansible does, for a file and a folder, over `local` and over real SSH (the inventory's `dfp_root: ~/dflash-local`
reached the upload as a literal `~`: "staged upload(s) do not match the manifest ... is missing").

The become case (another user's home) is tests/become/test_copy_home_become.py.
"""

from __future__ import annotations

import pwd
import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook


def push_play(tmp_path: Path, folder: str) -> Path:
    """A file and a folder from the control node, both under `~/<folder>`."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "b.txt").write_text("bee\n")
    (tmp_path / "a.txt").write_text("ay\n")
    tasks = [{"name": "make its folder", "file": {"path": f"~/{folder}/state", "state": "directory"}},
             {"name": "push a file", "copy": {"src": str(tmp_path / "a.txt"), "dest": f"~/{folder}/state/a.txt",
                                              "mode": "0600"}},
             {"name": "push a folder", "copy": {"src": f"{src}/", "dest": f"~/{folder}/tree/"}}]
    book = tmp_path / "pb.yaml"
    book.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    return book


def check_home(res, again, home: Path, folder: str, host: str) -> None:
    failed = [(t["task"], t["msg"]) for t in res.tasks if t["status"] == "failed"]
    assert res.exit_code == 0, failed
    assert (home / folder / "state" / "a.txt").read_text() == "ay\n"
    assert (home / folder / "state" / "a.txt").stat().st_mode & 0o777 == 0o600
    assert (home / folder / "tree" / "sub" / "b.txt").read_text() == "bee\n"
    assert not (home / "~").exists()  # nothing under a folder literally named `~` (the worker starts in the home)
    assert not list((home / folder).rglob(".dfp-staging"))  # the staging folder went with the install
    assert again.exit_code == 0 and again.recap[host]["changed"] == 0, again.tasks


def test_copy_to_a_tilde_dest_lands_in_the_local_users_home(tmp_path):
    folder = f".dfp-test-home-{uuid.uuid4().hex[:8]}"
    home = Path.home()
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"local": {"ansible_connection": "local"}}}}))
    book = push_play(tmp_path, folder)
    try:
        res = run_playbook(str(book), str(inv))
        again = run_playbook(str(book), str(inv))
        check_home(res, again, home, folder, "local")
    finally:
        shutil.rmtree(home / folder, ignore_errors=True)


@pytest.mark.ssh
def test_copy_to_a_tilde_dest_lands_in_the_ssh_users_home(ssh_host, inventory_file, tmp_path):
    folder = f"dfp-test-home-{uuid.uuid4().hex[:8]}"
    home = Path(pwd.getpwnam(ssh_host.user).pw_dir)
    inv = inventory_file(hosts=[ssh_host])
    book = push_play(tmp_path, folder)
    try:
        res = run_playbook(str(book), str(inv))
        again = run_playbook(str(book), str(inv))
        check_home(res, again, home, folder, ssh_host.name)
        assert (home / folder / "state" / "a.txt").stat().st_uid == pwd.getpwnam(ssh_host.user).pw_uid
    finally:
        shutil.rmtree(home / folder, ignore_errors=True)
