"""Ansible Vault: values decrypted for tasks, never shown; a wrong or missing password is one clear error.

The fixtures in cases/vault/ were encrypted by real ansible-vault (password in cases/vault/vault-password).
The CLI is run as a subprocess with ANSIBLE_VAULT_PASSWORD_FILE, as a user with Ansible's setup would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.errors import UserError
from engine.inventory.manager import Inventory
from engine.parsing import vault
from engine.parsing.yamlfile import load_yaml

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "inventory" / "cases" / "vault"
PASSWORD = CASE / "vault-password"
PLAINTEXTS = [v for host in yaml.safe_load((CASE / "case.yaml").read_text())["plaintexts"].values() for v in host.values()]


def run_cli(*args: str, password_file: Path | None = PASSWORD, cwd: Path = ROOT) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k != vault.ENV_VAR}
    if password_file is not None:
        env[vault.ENV_VAR] = str(password_file)
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture()
def with_password():
    vault.use_password_file(str(PASSWORD))
    yield
    vault.use_password_file(None)


def _copy_case(tmp_path: Path) -> Path:
    """A private copy (so a test can damage files) of the vault case; returns its inventory."""
    shutil.copytree(CASE, tmp_path / "case")
    return tmp_path / "case" / "hosts.yaml"


def test_vault_values_never_shown_in_console_json_or_junit(tmp_path):
    """A task prints and fails with vault values (one named like nothing secret): all of them are masked."""
    play = [{"hosts": "gpu2", "gather_facts": False, "tasks": [{"name": "show", "debug": {"msg": "host_only={{ host_only }}"}}]},
            {"hosts": "gpu1", "gather_facts": False, "tasks": [
                {"name": "show", "debug": {"msg": "motd={{ motd }}"}},
                {"name": "fail with it", "fail": {"msg": "cannot use {{ motd }}"}}]}]
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump(play))
    rc, out = run_cli("play", str(tmp_path / "pb.yaml"), "-i", str(CASE / "hosts.yaml"), "-v",
                      "--report", str(tmp_path / "r.json"), "--junit", str(tmp_path / "j.xml"))
    assert rc == 2, out  # the fail task failed: the run got as far as the tasks
    text = out + (tmp_path / "r.json").read_text() + (tmp_path / "j.xml").read_text()
    assert "motd=********" in out and "host_only=********" in out
    for plain in PLAINTEXTS:
        assert plain not in text


def test_inventory_list_shows_vault_values_masked():
    rc, out = run_cli("inventory", "--list", "-i", str(CASE / "hosts.yaml"))
    assert rc == 0, out
    assert '"motd": "********"' in out and '"plain_var": "visible-value"' in out
    for plain in PLAINTEXTS:
        assert plain not in out


def test_inventory_host_shows_vault_values_masked():
    rc, out = run_cli("inventory", "--host", "gpu1", "-i", str(CASE / "hosts.yaml"))
    assert rc == 0, out
    assert '"motd": "********"' in out and '"ansible_connection": "local"' in out
    for plain in PLAINTEXTS:
        assert plain not in out


def test_wrong_password_is_one_paragraph_naming_file_and_fix(tmp_path):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password\n")
    rc, out = run_cli("inventory", "--list", "-i", str(CASE / "hosts.yaml"), password_file=wrong)
    assert rc == 4, out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1
    assert "hosts.yaml:" in out and str(wrong) in out and "--vault-password-file" in out
    for plain in PLAINTEXTS:
        assert plain not in out


def test_missing_password_says_how_to_give_one():
    rc, out = run_cli("inventory", "--list", "-i", str(CASE / "hosts.yaml"), password_file=None)
    assert rc == 4, out
    assert "Traceback" not in out and "vault-encrypted" in out
    assert "--vault-password-file" in out and vault.ENV_VAR in out


def test_password_file_that_does_not_exist(tmp_path):
    rc, out = run_cli("inventory", "--list", "-i", str(CASE / "hosts.yaml"), password_file=tmp_path / "nope")
    assert rc == 4, out
    assert str(tmp_path / "nope") in out and "does not exist" in out and "Traceback" not in out


def test_vault_id_file_and_whole_file_decrypt(with_password):
    """1.2 (vault id) and 1.1 whole files give the values ansible-vault encrypted."""
    assert load_yaml(CASE / "host_vars" / "gpu2.yml") == {"host_only": "dfp-vault-12-host-secret"}
    inv = Inventory(CASE / "hosts.yaml")
    assert inv.hosts["gpu1"].vars["motd"] == "dfp-vault-motd-not-named-secret"
    assert inv.hosts["gpu2"].vars["vault_hf_token"] == "hf_dfpTestToken0123456789"


def test_executable_password_file_is_run_for_the_password(tmp_path):
    """As in Ansible: an executable password file is a script whose output is the password."""
    script = tmp_path / "vault-pass.sh"
    script.write_text(f"#!/bin/sh\ncat '{PASSWORD}'\n")
    script.chmod(0o755)
    rc, out = run_cli("inventory", "--list", "-i", str(_copy_case(tmp_path)), password_file=script)
    assert rc == 0, out
    assert '"motd": "********"' in out


def test_failing_password_script_is_a_clear_error(tmp_path):
    script = tmp_path / "vault-pass.sh"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    rc, out = run_cli("inventory", "--list", "-i", str(_copy_case(tmp_path)), password_file=script)
    assert rc == 4, out
    assert "exited with 3" in out and "executable bit" in out and "Traceback" not in out


def test_vault_id_client_script_is_refused(tmp_path):
    script = tmp_path / "vault-pass-client.py"
    script.write_text("#!/bin/sh\necho x\n")
    script.chmod(0o755)
    rc, out = run_cli("inventory", "--list", "-i", str(_copy_case(tmp_path)), password_file=script)
    assert rc == 4, out
    assert "client script" in out and "not supported" in out


def test_damaged_vault_value_names_file_and_line(tmp_path, with_password):
    inv_path = _copy_case(tmp_path)
    text = inv_path.read_text().replace("35636537363439333062636433383330", "zz636537363439333062636433383330")
    inv_path.write_text(text)
    with pytest.raises(UserError, match=r"hosts\.yaml:\d+ \(!vault value\): the vault data is damaged"):
        Inventory(inv_path)


def test_tampered_ciphertext_fails_the_hmac_like_a_wrong_password(tmp_path, with_password):
    target = tmp_path / "case" / "group_vars" / "all" / "vault.yml"
    _copy_case(tmp_path)
    header, *body = target.read_text().splitlines()
    salt, mac, ciphertext = bytes.fromhex("".join(body)).split(b"\n")
    flipped = ciphertext[:-2] + (b"00" if ciphertext[-2:] != b"00" else b"11")  # one byte of the ciphertext
    target.write_text(header + "\n" + b"\n".join([salt, mac, flipped]).hex() + "\n")
    with pytest.raises(UserError, match=r"vault\.yml \(vault-encrypted variables file\): the vault password .* does not decrypt"):
        Inventory(tmp_path / "case" / "hosts.yaml")


def test_unknown_cipher_is_refused(tmp_path, with_password):
    f = tmp_path / "v.yml"
    f.write_text("$ANSIBLE_VAULT;1.1;AES\n6162\n")
    with pytest.raises(UserError, match=r"vault cipher 'AES' is not supported"):
        load_yaml(f)


def test_a_vault_encrypted_ini_inventory_keeps_every_value_secret(tmp_path, with_password):
    """An INI inventory encrypted whole with real ansible-vault: its values are masked in --host/--list output even
    when their names do not look secret (the YAML path did this; the INI one did not)."""
    ini = tmp_path / "inv"
    ini.write_text("[gpu]\nh1 ansible_host=10.0.0.5 plain_name=zzzz9999Secret\n")
    subprocess.run(["ansible-vault", "encrypt", "--vault-password-file", str(PASSWORD), str(ini)], check=True,
                   capture_output=True)
    assert ini.read_text().startswith("$ANSIBLE_VAULT;1.1;AES256")
    inv = Inventory(ini)
    assert inv.hosts["h1"].vars["plain_name"] == "zzzz9999Secret"  # tasks read the real value
    assert "zzzz9999Secret" not in json.dumps(inv.host_vars("h1")) + json.dumps(inv.as_list())


def test_a_vault_tag_on_plain_text_is_refused_without_echoing_it(tmp_path, with_password):
    f = tmp_path / "v.yml"
    f.write_text("hf_token: !vault hf_PLAINTEXTSECRET_abcdef123456\n")
    with pytest.raises(UserError) as exc:
        load_yaml(f)
    assert "PLAINTEXTSECRET" not in str(exc.value) and "vault header" in str(exc.value)
