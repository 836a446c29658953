"""vars_files and include_vars as Ansible reads them, compared with real ansible-playbook on a local host: the
files' variables, their precedence (vars_files above play vars; include_vars above task vars, below set_fact and
-e), a templated vars_files name with a first-found list, include_vars' file / dir / depth / files_matching /
ignore_files / name / hash_behaviour, a role's vars/ folder, vault-encrypted files; and the refusals: a file name
built from a remote host's answer (the control node's own may name one), a missing file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.api import run_playbook
from engine.parsing import vault
from tests.helpers import required_ansible_tool


def _tree(tmp_path: Path, files: dict) -> None:
    for rel, data in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"all": {"hosts": {"h": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))


def ours(tmp_path: Path, plays: list, **kw):
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump(plays, sort_keys=False))
    return run_playbook(str(tmp_path / "pb.yaml"), inventory=str(tmp_path / "inv.yaml"), **kw)


def ansible(tmp_path: Path, plays: list, *args: str) -> tuple[int, str]:
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump(plays, sort_keys=False))
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCAL_TEMP": str(home / ".tmp"), "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(tmp_path / "inv.yaml"),
                           str(tmp_path / "pb.yaml"), *args], env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout + proc.stderr


def both_pass(tmp_path: Path, plays: list, *args: str, **kw):
    """The play's asserts hold in both tools (exit 0)."""
    code, out = ansible(tmp_path, plays, *args)
    assert code == 0, out[-4000:]
    res = ours(tmp_path, plays, **kw)
    assert res.exit_code == 0, [t for t in res.tasks if t["status"] == "failed"] or res.error
    return res


def check(*conditions: str) -> dict:
    return {"name": "check", "assert": {"that": list(conditions)}}


def test_vars_files_templated_first_found_and_precedence(tmp_path):
    _tree(tmp_path, {"vars/common.yml": {"a": "common", "b": "common"}, "vars/prod.yml": {"b": "prod", "c": "{{ a }}-c"}})
    plays = [{"hosts": "h", "gather_facts": False, "vars": {"a": "play", "env": "prod"},
              "vars_files": ["vars/common.yml", ["vars/{{ env }}-missing.yml", "vars/{{ env }}.yml"]],
              "tasks": [check("a == 'common'", "b == 'prod'", "c == 'common-c'"),
                        {"name": "task vars win", "assert": {"that": ["a == 'task'"]}, "vars": {"a": "task"}}]}]
    both_pass(tmp_path, plays)
    plays[0]["tasks"] = [check("b == 'cli'")]
    both_pass(tmp_path, plays, "-e", "b=cli", extra_vars={"b": "cli"})


def test_vars_files_missing_is_refused_before_any_host(tmp_path):
    _tree(tmp_path, {})
    res = ours(tmp_path, [{"hosts": "h", "gather_facts": False, "vars_files": ["nope.yml"],
                           "tasks": [{"debug": {"msg": "x"}}]}])
    assert res.exit_code == 4 and "vars_files" in res.error and "nope.yml" in res.error, res.error


def test_vault_encrypted_vars_file_is_read_and_its_values_masked(tmp_path, monkeypatch):
    _tree(tmp_path, {"pw": "s3cret\n"})
    tool = required_ansible_tool("ansible-vault")
    plain = tmp_path / "vault.yml"
    plain.write_text("db_token: hunter2-token\nport: 5\n")
    subprocess.run([str(tool), "encrypt", "--vault-password-file", str(tmp_path / "pw"), str(plain)], check=True,
                   capture_output=True, env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)})
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(tmp_path / "pw"))
    vault.use_password_file(str(tmp_path / "pw"))
    plays = [{"hosts": "h", "gather_facts": False, "vars_files": ["vault.yml"],
              "tasks": [check("port == 5", "db_token == 'hunter2-token'"),
                        {"name": "show", "debug": {"msg": "{{ db_token }}"}},
                        {"name": "inc", "include_vars": {"file": str(plain), "name": "v"}},
                        {"name": "show2", "debug": {"msg": "{{ v.db_token }}"}}]}]
    try:
        res = both_pass(tmp_path, plays, "--vault-password-file", str(tmp_path / "pw"))
    finally:
        vault.use_password_file(None)
    assert "hunter2" not in str(res.tasks)


def test_include_vars_file_dir_name_and_precedence(tmp_path):
    _tree(tmp_path, {
        "vars/one.yml": {"x": "one", "shared": "one"},
        "vars/d/a.yml": {"shared": "a", "only_a": 1},
        "vars/d/b.yaml": {"shared": "b"},
        "vars/d/skip.yml": {"skipped": True},
        "vars/d/sub/c.yml": {"deep": True, "shared": "c"},
        "vars/d/notes.txt": "not vars",
        "vars/h1.yml": {"cfg": {"k1": 1, "k2": {"a": 1}}},
        "vars/h2.yml": {"cfg": {"k2": {"b": 2}, "k3": 3}},
    })
    plays = [{"hosts": "h", "gather_facts": False, "vars": {"x": "play"}, "tasks": [
        {"include_vars": "one.yml", "register": "r1"},
        check("x == 'one'", "r1.ansible_included_var_files | length == 1",
              "r1.ansible_included_var_files[0].endswith('vars/one.yml')"),
        {"name": "task vars lose", "assert": {"that": ["x == 'one'"]}, "vars": {"x": "task"}},
        {"set_fact": {"x": "fact"}},
        {"include_vars": {"file": "vars/one.yml"}},
        check("x == 'fact'"),
        {"include_vars": {"dir": "vars/d", "depth": 1, "ignore_files": ["skip.yml"],
                          "ignore_unknown_extensions": True}, "register": "r2"},
        check("shared == 'b'", "only_a == 1", "deep is not defined", "skipped is not defined",
              "r2.ansible_included_var_files | length == 2"),
        {"include_vars": {"dir": "vars/d", "files_matching": "c.yml", "name": "under"}},
        check("under == {'deep': true, 'shared': 'c'}"),
        {"include_vars": {"file": "h1.yml"}},
        {"include_vars": {"file": "h2.yml", "hash_behaviour": "merge"}},
        check("cfg == {'k1': 1, 'k2': {'a': 1, 'b': 2}, 'k3': 3}"),
        {"include_vars": {"dir": "vars/d"}, "register": "bad", "ignore_errors": True},
        check("bad is failed", "'valid extension' in bad.message"),
        {"include_vars": {"file": "missing.yml"}, "register": "gone", "ignore_errors": True},
        check("gone is failed", "'Could not find' in gone.message"),
    ]}]
    both_pass(tmp_path, plays)


def test_include_vars_in_a_role_reads_its_vars_folder(tmp_path):
    _tree(tmp_path, {"roles/r/vars/extra.yml": {"from_role": "yes"},
                     "roles/r/vars/main.yml": {"main_var": 1},
                     "roles/r/vars/sub/s.yml": {"from_dir": "yes"},
                     "roles/r/tasks/main.yml": yaml.safe_dump([
                         {"include_vars": "extra.yml"},
                         {"include_vars": {"dir": "sub"}},
                         check("from_role == 'yes'", "from_dir == 'yes'", "main_var == 1")])})
    both_pass(tmp_path, [{"hosts": "h", "gather_facts": False, "roles": ["r"]}])


@pytest.mark.ssh
def test_include_vars_name_from_a_hosts_answer_is_refused(tmp_path, remote_host):
    """include_vars reads its file on the control node: a remote host's answer never names it."""
    _tree(tmp_path, {"vars/one.yml": {"x": 1}})
    (tmp_path / "pb.yaml").write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"command": {"argv": ["echo", "one.yml"]}, "register": "out"},
        {"name": "inc", "include_vars": {"file": "{{ out.stdout }}"}}]}], sort_keys=False))
    res = run_playbook(str(tmp_path / "pb.yaml"), inventory=remote_host.inventory)
    failed = res.find("inc", remote_host.name)
    assert res.exit_code == 2 and "built from what a host returned" in failed[0].msg, failed


def test_include_vars_name_from_the_control_nodes_own_answer_is_read(tmp_path):
    """A local host is the control node: the file name it answered is its own word."""
    _tree(tmp_path, {"vars/one.yml": {"x": 1}})
    res = ours(tmp_path, [{"hosts": "h", "gather_facts": False, "tasks": [
        {"command": {"argv": ["echo", "one.yml"]}, "register": "out"},
        {"name": "inc", "include_vars": {"file": "{{ out.stdout }}"}}, check("x == 1")]}])
    assert res.exit_code == 0, res.error or res.results


def test_include_vars_under_run_once_reaches_every_host(tmp_path):
    _tree(tmp_path, {"vars/one.yml": {"x": "one"}})
    (tmp_path / "inv.yaml").write_text(yaml.safe_dump({"all": {"hosts": {
        n: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for n in ("h", "g")}}}))
    plays = [{"hosts": "all", "gather_facts": False, "tasks": [
        {"include_vars": "one.yml", "run_once": True}, check("x == 'one'")]}]
    both_pass(tmp_path, plays)
