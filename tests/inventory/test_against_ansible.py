"""Our inventory reading against real `ansible-inventory --list`, case by case (tests/inventory/cases/).

Each case folder has a case.yaml: `sources` (the -i arguments, in order), optionally
`vault_password_file` and `plaintexts` (what each host must see decrypted). Add a folder to add a case.
Hosts, groups (hosts in order, children as a set) and every host's merged variables must equal
ansible-inventory's. ansible-inventory shows `!vault` values as {"__ansible_vault": ciphertext}; the test
decrypts those with real `ansible-vault decrypt` before comparing, so both decryptions are checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.inventory.manager import Inventory
from engine.parsing import vault
from engine.template.secrets import MASK
from tests.helpers import required_ansible_tool

CASES_DIR = Path(__file__).resolve().parent / "cases"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "case.yaml").is_file())
@pytest.fixture(scope="module")
def ansible_inventory() -> Path:
    return required_ansible_tool("ansible-inventory")


@pytest.fixture()
def case(request):
    folder = CASES_DIR / request.param
    spec = yaml.safe_load((folder / "case.yaml").read_text())
    password = folder / spec["vault_password_file"] if spec.get("vault_password_file") else None
    vault.use_password_file(str(password) if password else None)
    yield folder, spec, password
    vault.use_password_file(None)


def _run_ansible(tool: Path, sources: list[Path], password: Path | None, cwd: Path) -> dict:
    argv = [str(tool), "--list"] + [a for s in sources for a in ("-i", str(s))]
    if password:
        argv += ["--vault-password-file", str(password)]
    config = cwd / "ansible.cfg"  # an empty one: no user or system configuration changes the result
    config.write_text("[defaults]\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(config), "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",
           "ANSIBLE_HOME": str(cwd / "ansible-home"), "ANSIBLE_NOCOLOR": "1"}
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _decrypt_with_ansible(value, password: Path | None, tmp: Path):
    """ansible-inventory's {"__ansible_vault": ...} values, decrypted by real ansible-vault."""
    if isinstance(value, dict) and set(value) == {"__ansible_vault"}:
        envelope = tmp / "value.vault"
        envelope.write_text(value["__ansible_vault"])
        tool = required_ansible_tool("ansible-vault")
        proc = subprocess.run([str(tool), "decrypt", "--vault-password-file", str(password), "--output", "-",
                               str(envelope)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout
    if isinstance(value, dict):
        return {k: _decrypt_with_ansible(v, password, tmp) for k, v in value.items()}
    return value


def _spec(name: str) -> dict:
    return yaml.safe_load((CASES_DIR / name / "case.yaml").read_text())


def _groups(listing: dict) -> dict:
    return {name: {"hosts": entry.get("hosts", []), "children": sorted(entry.get("children", []))}
            for name, entry in listing.items() if name != "_meta"}


@pytest.mark.parametrize("case", CASES, indirect=True)
def test_inventory_matches_ansible_inventory(case, ansible_inventory, tmp_path):
    folder, spec, password = case
    sources = [folder / s for s in spec["sources"]]
    theirs = _run_ansible(ansible_inventory, sources, password, tmp_path)
    inv = Inventory(sources)
    ours = inv.as_list()
    assert _groups(ours) == _groups(theirs)
    their_vars = _decrypt_with_ansible(theirs["_meta"]["hostvars"], password, tmp_path)
    our_vars = {h: host.vars for h, host in inv.hosts.items() if host.vars}
    assert our_vars == their_vars


@pytest.mark.parametrize("case", [c for c in CASES if "plaintexts" in _spec(c)], indirect=True)
def test_vault_values_are_decrypted_for_tasks_and_masked_in_the_listing(case):
    """Tasks see the plaintext; `invoke inventory --list` (as_list) shows every vault value masked."""
    folder, spec, _ = case
    inv = Inventory([folder / s for s in spec["sources"]])
    listing = inv.as_list()
    shown = json.dumps(listing)
    for host, expected in spec["plaintexts"].items():
        for name, plain in expected.items():
            assert inv.hosts[host].vars[name] == plain
            assert listing["_meta"]["hostvars"][host][name] == MASK
            assert plain not in shown


@pytest.mark.parametrize("case", [c for c in CASES if "plaintexts" not in _spec(c)], indirect=True)
def test_invoke_inventory_list_matches_ansible_inventory(case, ansible_inventory, tmp_path):
    """The command users run, `invoke inventory --list -i SOURCE [-i SOURCE...]`, prints what ansible-inventory prints."""
    folder, spec, password = case
    sources = [folder / s for s in spec["sources"]]
    theirs = _run_ansible(ansible_inventory, sources, password, tmp_path)
    flags = [arg for source in sources for arg in ("-i", str(source))]
    proc = subprocess.run([sys.executable, "-m", "invoke", "inventory", "--list", *flags],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ours = json.loads(proc.stdout)
    assert _groups(ours) == _groups(theirs)
    assert ours["_meta"]["hostvars"] == theirs["_meta"]["hostvars"]
