"""copy with `src:` to a dest under `~` with become: `~` is the become user's home (the staging too), as in
Ansible, not the login user's and not a folder named `~` (tests/engine/run/test_copy_home.py: without become)."""

from __future__ import annotations

import pwd
import shutil
import uuid
from pathlib import Path

import pytest

from engine.api import run_playbook
from tests.become.conftest import NOPASSWD_USER, TARGET_USER
from tests.become.test_become import inventory, playbook
from tests.engine.run.test_copy_home import check_home

pytestmark = pytest.mark.ssh


def test_copy_to_a_tilde_dest_with_become_lands_in_the_become_users_home(become_users, tmp_path):
    folder = f"dfp-test-home-{uuid.uuid4().hex[:8]}"
    (tmp_path / "a.txt").write_text("ay\n")
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "b.txt").write_text("bee\n")
    tasks = [{"name": "push a file", "copy": {"src": str(tmp_path / "a.txt"), "dest": f"~/{folder}/state/",
                                              "mode": "0600"}},
             {"name": "push a folder", "copy": {"src": f"{src}/", "dest": f"~/{folder}/tree/"}}]
    book = playbook(tmp_path, [dict(t, become=True, become_user=TARGET_USER) for t in tasks])
    inv = inventory(tmp_path, become_users.host_vars(NOPASSWD_USER))
    home, login_home = Path(pwd.getpwnam(TARGET_USER).pw_dir), Path(pwd.getpwnam(NOPASSWD_USER).pw_dir)
    try:
        res = run_playbook(str(book), str(inv))
        again = run_playbook(str(book), str(inv))
        check_home(res, again, home, folder, "h1")
        assert (home / folder / "state" / "a.txt").stat().st_uid == pwd.getpwnam(TARGET_USER).pw_uid
        assert not (login_home / folder).exists()
    finally:
        shutil.rmtree(home / folder, ignore_errors=True)
        shutil.rmtree(login_home / folder, ignore_errors=True)
