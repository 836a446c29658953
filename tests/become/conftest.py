"""Users for the become tests, logging in by key through the real sshd harness (host keys checked):

  dfpsudo     NOPASSWD sudo for everything
  dfpsudopw   sudo with its password (asked every time: timestamp_timeout=0)
  dfpnosudo   a password, no sudo rights
  dfpbtarget  a become_user target, with a fresh empty home each session (its runtime cache starts empty)

The sudoers drop-in (/etc/sudoers.d/dfp-test-become-PID) is checked with visudo and removed at session end;
the password users get random passwords each session and a locked one ('*') afterwards.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import sshd_harness

SUDO = shutil.which("sudo")
NOPASSWD_USER, PASSWORD_USER, NO_SUDO_USER, TARGET_USER = "dfpsudo", "dfpsudopw", "dfpnosudo", "dfpbtarget"


@dataclass
class BecomeUsers:
    pool: sshd_harness.SshdPool
    passwords: dict

    def host_vars(self, user: str, host: sshd_harness.SshHost | None = None, **extra) -> dict:
        """Inventory variables to log in as `user` on a harness host."""
        h = host or self.pool.hosts[0]
        return dict(h.inventory_vars(), ansible_user=user, **extra)


def _user(name: str, password: str | None) -> None:
    sshd_harness.ensure_user(name)
    if password is None:
        subprocess.run(["usermod", "-p", "*", name], check=True)
    else:
        subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True)


def _fresh_user(name: str) -> None:
    subprocess.run(["userdel", "-r", name], capture_output=True, check=False)
    sshd_harness.ensure_user(name)


def _sudoers(path: Path) -> None:
    path.write_text(
        f"{NOPASSWD_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n"
        f"Defaults:{PASSWORD_USER} timestamp_timeout=0\n"
        f"Defaults:{NO_SUDO_USER} timestamp_timeout=0\n"
        f"{PASSWORD_USER} ALL=(ALL:ALL) ALL\n"
    )
    os.chmod(path, 0o440)
    check = subprocess.run(["visudo", "-cf", str(path)], capture_output=True, text=True)
    if check.returncode != 0:
        path.unlink()
        raise RuntimeError(f"the test sudoers drop-in is invalid: {check.stdout}{check.stderr}")


@pytest.fixture(scope="session")
def become_users(sshd_pool):
    if SUDO is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run the become tests: sudo is not installed (.ci/run installs it)")
        pytest.skip("sudo is not installed (apt-get install sudo)")
    passwords = {PASSWORD_USER: secrets.token_urlsafe(12), NO_SUDO_USER: secrets.token_urlsafe(12)}
    _user(NOPASSWD_USER, None)
    for name, password in passwords.items():
        _user(name, password)
    _fresh_user(TARGET_USER)
    pub = Path(sshd_pool.hosts[0].key + ".pub")
    for name in (NOPASSWD_USER, *passwords):
        auth = sshd_pool.root / f"authorized_keys_{name}"
        shutil.copy(pub, auth)
        os.chmod(auth, 0o644)
    drop_in = Path(f"/etc/sudoers.d/dfp-test-become-{os.getpid()}")
    _sudoers(drop_in)
    try:
        yield BecomeUsers(sshd_pool, passwords)
    finally:
        drop_in.unlink(missing_ok=True)
        for name in passwords:
            subprocess.run(["usermod", "-p", "*", name], check=False)
