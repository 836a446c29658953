"""A typed sudo password is data, never a template: -K with `{{ x }}`, `{%`, `{#`, quotes and backslashes in it
reaches sudo byte for byte (real sshd, real sudo) and is never shown. Before, it joined the variables as a template:
`{{ x }}` failed the run as an undefined variable, `{% raw %}` as a template syntax error, and a password that
rendered to other text was sent to sudo as that text. The file named by ansible_become_password_file is read as
it is too (a guard)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.become.conftest import PASSWORD_USER
from tests.become.test_cli_connection_flags import SHOW, WHO, cli, files, shown_user

TRICKY = "a{{ x }}b{% raw %}c{#d'e\"f\\g\\\\h }}{{ '' }}i"


@pytest.fixture
def tricky_password(become_users):
    """PASSWORD_USER's password set to TRICKY for one test, then back to the session's."""
    def chpasswd(password: str) -> None:
        subprocess.run(["chpasswd"], input=f"{PASSWORD_USER}:{password}\n", text=True, check=True)

    chpasswd(TRICKY)
    try:
        yield TRICKY
    finally:
        chpasswd(become_users.passwords[PASSWORD_USER])


def _never_shown(password: str, out: str) -> None:
    for spelling in (password, json.dumps(password)[1:-1], repr(password)[1:-1], "raw %}c{#d"):
        assert spelling not in out, f"{spelling!r} shown:\n{out}"


def test_a_typed_password_with_template_syntax_reaches_sudo_as_typed(become_users, tricky_password, tmp_path,
                                                                      shared_tmp):
    host = become_users.pool.hosts[0]
    pb, inv = files(tmp_path, shared_tmp, host, [WHO, SHOW])
    code, out = cli(pb, inv, "-u", PASSWORD_USER, "--private-key", host.key, "-b", "-K", stdin=tricky_password + "\n")
    assert code == 0, out
    assert shown_user(out) == "root" and "incorrect password" not in out, out
    _never_shown(tricky_password, out)


def test_a_password_file_with_template_syntax_is_read_as_it_is(become_users, tricky_password, tmp_path, shared_tmp):
    host = become_users.pool.hosts[0]
    secret = tmp_path / "sudo-password"
    secret.write_text(tricky_password + "\n")
    secret.chmod(0o600)
    pb, inv = files(tmp_path, shared_tmp, host, [WHO, SHOW], ansible_become_password_file=str(secret))
    code, out = cli(pb, inv, "-u", PASSWORD_USER, "--private-key", host.key, "-b")
    assert code == 0, out
    assert shown_user(out) == "root", out
    _never_shown(tricky_password, out)


@pytest.mark.parametrize("value", ["{% raw %}s3cr3t-v4lue", "{{ s3cr3t_undefined }}-v4lue", "{{ 's3cr3t' | nofilter }}"])
def test_an_inventory_password_that_is_a_broken_template_is_one_paragraph(tmp_path, value):
    """A password written in the inventory is a template (as in Ansible); one that cannot be rendered was a
    jinja2 traceback when the play started. Now the host fails naming the variable, never quoting the value, and
    nothing runs there (local connection: no sudo needed to get that far)."""
    marker = tmp_path / "marker"
    pb, inv = tmp_path / "pb.yaml", tmp_path / "inv.yaml"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "become": True, "tasks": [
        {"name": "Would change the host", "file": {"path": str(marker), "state": "directory"}}]}]))
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"ansible_connection": "local",
                                                             "ansible_become_password": value}}}}))
    code, out = cli(pb, inv)
    assert code == 2 and "Traceback" not in out, out
    assert "ansible_become_password is a template that cannot be rendered" in out, out
    assert "s3cr3t" not in out and not marker.exists(), out
