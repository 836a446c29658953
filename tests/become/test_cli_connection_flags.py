"""ansible-playbook's connection and become options through the real CLI against a real sshd and sudo: -u and
--private-key where the inventory says nothing (its ansible_user wins where it does), -b and --become-user below the
playbook's keywords, -K asking the sudo password once (read from stdin when there is no terminal, as getpass
does) and never showing it."""

from __future__ import annotations

import itertools
import subprocess
import sys

import yaml

from tests.become.conftest import NOPASSWD_USER, PASSWORD_USER, TARGET_USER
from tests.cli.helpers import ROOT

WHO = {"name": "who", "command": {"argv": ["id", "-un"]}, "register": "who"}
SHOW = {"name": "show", "debug": {"msg": "user={{ who.stdout | trim }}"}}


def files(tmp_path, root, host, tasks, **inventory_vars):
    """A playbook of `tasks` and an inventory naming only the host's address, port and known_hosts (plus
    `inventory_vars`): no user, no key; the tool's root in `root` (a folder every test user may write)."""
    pb, inv = tmp_path / "pb.yaml", tmp_path / "inv.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    hv = {"ansible_host": host.address, "ansible_port": host.port, "ansible_ssh_known_hosts_file": host.known_hosts,
          "dfp_root": str(fresh_root(root)), **inventory_vars}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": hv}}}))
    return pb, inv


def fresh_root(parent):
    """A tool root of its own per run (each run may log in as another user: one's lock is not the next one's)."""
    path = parent / f"root{next(_RUNS)}"
    path.mkdir()
    path.chmod(0o777)
    return path


_RUNS = itertools.count()


def cli(pb, inv, *flags, stdin: str = ""):
    proc = subprocess.run([sys.executable, "-m", "invoke", "play", str(pb), "-i", str(inv), *flags], cwd=ROOT,
                          input=stdin, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


def shown_user(out: str) -> str:
    """debug's msg as ansible-playbook prints it: `"msg": "user=NAME"`."""
    return next(line.split("user=")[1].strip().strip('"') for line in out.splitlines() if "user=" in line)


def test_user_and_private_key_from_the_command_line(become_users, tmp_path, shared_tmp):
    host = become_users.pool.hosts[0]
    pb, inv = files(tmp_path, shared_tmp, host, [WHO, SHOW])
    code, out = cli(pb, inv, "-u", NOPASSWD_USER, "--private-key", host.key)
    assert code == 0, out
    assert shown_user(out) == NOPASSWD_USER
    pb, inv = files(tmp_path, shared_tmp, host, [WHO, SHOW], ansible_user=host.user, ansible_ssh_private_key_file=host.key)
    code, out = cli(pb, inv, "-u", NOPASSWD_USER)
    assert code == 0 and shown_user(out) == host.user, out  # the inventory's ansible_user wins over -u


def test_become_flags_are_defaults_below_the_playbooks_keywords(become_users, tmp_path, shared_tmp):
    host = become_users.pool.hosts[0]
    tasks = [WHO, SHOW, {"name": "plain", "command": {"argv": ["id", "-un"]}, "become": False, "register": "plain"},
             {"name": "show plain", "debug": {"msg": "plain={{ plain.stdout | trim }}"}}]
    pb, inv = files(tmp_path, shared_tmp, host, tasks)
    code, out = cli(pb, inv, "-u", NOPASSWD_USER, "--private-key", host.key, "-b")
    assert code == 0, out
    assert shown_user(out) == "root" and f"plain={NOPASSWD_USER}" in out, out
    pb, inv = files(tmp_path, shared_tmp, host, tasks)  # a root of its own: the lock is taken as the become user
    code, out = cli(pb, inv, "-u", NOPASSWD_USER, "--private-key", host.key, "-b", "--become-user", TARGET_USER)
    assert code == 0 and shown_user(out) == TARGET_USER, out


def test_ask_become_pass_reads_the_password_once_and_never_shows_it(become_users, tmp_path, shared_tmp):
    host = become_users.pool.hosts[0]
    password = become_users.passwords[PASSWORD_USER]
    pb, inv = files(tmp_path, shared_tmp, host, [WHO, SHOW])
    code, out = cli(pb, inv, "-u", PASSWORD_USER, "--private-key", host.key, "-b", "-K", stdin=password + "\n")
    assert code == 0, out
    assert shown_user(out) == "root" and "BECOME password" in out
    assert password not in out
    code, out = cli(pb, inv, "-u", PASSWORD_USER, "--private-key", host.key, "-b", "-K", stdin="wrong-one\n")
    assert code == 2 and "wrong-one" not in out, out
