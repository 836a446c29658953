"""The lookups of engine/template/lookups_lists.py (sequence, items, list, dict, indexed_items, nested, together,
subelements, inventory_hostnames) and fileglob, unvault and config (engine/template/lookups.py): the same playbook
through real ansible-playbook and ours, each debug message compared; then the trust rules and the errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from engine.api import run_playbook
from tests.helpers import required_ansible_tool

INV = {"all": {"hosts": {"localhost": {"ansible_connection": "local"}},
               "children": {"web": {"hosts": {"web1": {}, "web2": {}}}, "db": {"hosts": {"db1": {}, "web2": {}}}}}}
USERS = [{"name": "alice", "groups": ["wheel", "dev"], "auth": {"keys": ["k1"]}},
         {"name": "bob", "groups": [], "auth": {"keys": ["k2", "k3"]}}, {"name": "carol", "skipped": True}]
EXPRESSIONS = [
    "query('sequence', '5')", "query('sequence', '5-8')", "query('sequence', '2-10/2')",
    "query('sequence', '4:host%02d')", "query('sequence', 'start=5 end=11 stride=2 format=0x%02x')",
    "query('sequence', 'count=5')", "query('sequence', 'start=0 count=5 stride=2')",
    "query('sequence', 'start=10 end=0 stride=-1')", "query('sequence', 'count=0')", "query('sequence', start=2, end=4)",
    "query('sequence', 'end=3', start=2)", "lookup('sequence', 'start=1 end=3 format=\"a %d\"')",
    "lookup('sequence', 'count=1')", "query('sequence', '1-2', '5-6')",
    "query('items', [1, [2, [3]]], 4)", "lookup('items', [1, 2])", "query('list', [1, [2]], 3)",
    "query('dict', {'a': 1, 'b': {'c': 2}})", "query('dict', {'a': 1}, {'b': 2})",
    "query('indexed_items', ['a', 'b'], 'c')", "query('nested', [1, 2], ['a', 'b'])",
    "query('nested', [1], ['a'], ['x', 'y'])", "query('nested', [[1, 2]], ['a'])",
    "query('together', [1, 2, 3], ['a', 'b'])", "query('together', [1], [2], [3])",
    "query('subelements', users, 'groups')", "query('subelements', users, 'auth.keys')",
    "query('subelements', users, 'groups', {'skip_missing': true})",
    "query('subelements', {'x': users[0]}, 'groups')",
    "query('inventory_hostnames', 'all')", "query('inventory_hostnames', 'web')",
    "query('inventory_hostnames', 'web:&db')", "query('inventory_hostnames', 'all:!web')",
    "query('inventory_hostnames', 'web*')", "query('inventory_hostnames', 'nosuch')",
    "query('inventory_hostnames', 'web', 'db')", "lookup('inventory_hostnames', 'db')",
    "query('fileglob', '*.txt') | map('basename') | sort", "query('fileglob', 'sub/*.cfg') | map('basename') | sort",
    "query('fileglob', 'nothing*') | list", "lookup('fileglob', playbook_dir + '/files/*.txt') | split(',') | map('basename') | sort",
    "lookup('unvault', 'plain.txt')", "query('unvault', 'plain.txt', 'b.txt')",
    "lookup('config', 'DEFAULT_HASH_BEHAVIOUR')", "lookup('config', 'DEFAULT_ROLES_PATH')",
    "query('config', 'NOPE_SETTING', on_missing='skip')", "lookup('config', 'DEFAULT_BECOME_METHOD')",
    "lookup('config', 'DEFAULT_FORCE_HANDLERS')", "query('random_choice', 'only')", "query('random_choice')",
    "lookup('config', 'ALLOW_BROKEN_CONDITIONALS')", "lookup('list', wantlist=True, *users)",
]


@pytest.fixture
def project(tmp_path):
    for folder in ("files/sub", "roles"):
        (tmp_path / folder).mkdir(parents=True)
    for name, text in {"files/a.txt": "a\n", "files/b.txt": "files b\n", "b.txt": "root b\n", "c.txt": "c",
                       "files/sub/x.cfg": "x", "files/sub/y.cfg": "y", "files/plain.txt": "  plain text\n\n"}.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def write_book(folder, tasks, vars=None, hosts="localhost"):
    path = folder / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": hosts, "gather_facts": False, "vars": vars or {}, "tasks": tasks}],
                                   sort_keys=False))
    return path


def ansible_messages(book, env_extra):
    """Each debug task's msg from real ansible-playbook, by task name."""
    inv = book.parent / "inventory.yaml"
    inv.write_text(yaml.safe_dump(INV, sort_keys=False))
    env = {"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(book.parent),
           "ANSIBLE_LOCAL_TEMP": str(book.parent / ".ansible-tmp"), "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
           **env_extra}
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(book)],
                          capture_output=True, text=True, timeout=180, cwd=book.parent, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {m.group(1): json.loads(m.group(2)) for m in re.finditer(r'TASK \[(\w+)\].*?"msg": (".*?")\n', proc.stdout, re.S)}


def test_lookups_give_what_ansible_gives(project, monkeypatch):
    roles = str(project / "roles")
    monkeypatch.setenv("ANSIBLE_ROLES_PATH", roles)
    monkeypatch.delenv("ANSIBLE_FORCE_HANDLERS", raising=False)
    monkeypatch.chdir(project)
    tasks = [{"name": f"t{i}", "debug": {"msg": f"{{{{ {e} | to_json }}}}"}} for i, e in enumerate(EXPRESSIONS)]
    book = write_book(project, tasks, {"users": USERS})
    theirs = ansible_messages(book, {"ANSIBLE_ROLES_PATH": roles})
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, [t["msg"] for t in res.tasks if t["status"] == "failed"]
    for i, expr in enumerate(EXPRESSIONS):
        assert json.loads(res.find(f"t{i}", "localhost")[0].msg) == json.loads(theirs[f"t{i}"]), expr


def test_with_loops_spelled_as_lookups_in_loop(project):
    """`loop: "{{ query('nested', ...) }}"`, as Ansible's docs turn with_nested into loop."""
    tasks = [{"name": "n", "debug": {"msg": "{{ item.0 }}-{{ item.1 }}"}, "register": "n",
              "loop": "{{ query('nested', ['a', 'b'], [1, 2]) }}"},
             {"name": "s", "debug": {"msg": "{{ item }}"}, "register": "s",
              "loop": "{{ query('sequence', 'start=1 end=3 format=h%02d') }}"},
             {"name": "show", "debug": {"msg": "{{ (n.results + s.results) | map(attribute='msg') | join(' ') }}"}}]
    res = run_playbook(str(write_book(project, tasks)), inventory=INV)
    assert res.exit_code == 0, res.tasks
    assert res.find("show", "localhost")[0].msg == "a-1 a-2 b-1 b-2 h01 h02 h03"


@pytest.mark.parametrize(("expr", "words"), [
    ("query('sequence', 'start=1')", "give count or end"),
    ("query('sequence', 'count=2 end=3')", "give count or end, not both"),
    ("query('sequence', 'start=5 end=1')", "to count backwards make stride negative"),
    ("query('sequence', 'end=3 format=%d%d')", "must hold exactly one % field"),
    ("query('sequence', 'end=3 bogus=1')", "unrecognized argument 'bogus=1'"),
    ("query('sequence', 'start=x end=3')", "start must be a whole number"),
    ("query('sequence', 'end=10000000')", "limit"),
    ("query('dict', [1])", "it takes mappings"),
    ("query('nested', 1)", "each term must be a list"),
    ("query('subelements', users)", "it takes a list of mappings"),
    ("query('subelements', users, 'nope')", "no key 'nope' in the item"),
    ("query('config', 'NOPE_SETTING')", "no setting 'NOPE_SETTING'"),
    ("query('config', 'X', on_missing='boo')", "on_missing must be one of"),
    ("query('config', 'remote_tmp', plugin_type='shell', plugin_name='sh')", "settings of plugins"),
    ("lookup('unvault', 'nope.txt')", "no file 'nope.txt'; looked in"),
])
def test_a_bad_lookup_fails_the_task_with_one_message(project, expr, words):
    res = run_playbook(str(write_book(project, [{"name": "t", "debug": {"msg": f"{{{{ {expr} }}}}"}}],
                                      {"users": USERS})), inventory=INV)
    failed = [t for t in res.tasks if t["status"] == "failed"]
    assert failed and words in failed[0]["msg"] and "Traceback" not in failed[0]["msg"], res.tasks


@pytest.mark.ssh
def test_a_fileglob_built_from_a_hosts_answer_stays_inside_the_playbook(project, tmp_path_factory, remote_host):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "k.txt").write_text("key")
    tasks = [{"name": "ask", "command": {"argv": ["echo", str(outside)]}, "register": "out"},
             {"name": "glob", "debug": {"msg": "{{ query('fileglob', out.stdout + '/*.txt') }}"}, "ignore_errors": True},
             {"name": "inside", "command": {"argv": ["echo", "sub"]}, "register": "sub"},
             {"name": "ok", "debug": {"msg": "{{ query('fileglob', sub.stdout + '/*.cfg') | map('basename') | sort }}"}}]
    res = run_playbook(str(write_book(project, tasks, hosts="all")), inventory=remote_host.inventory)
    glob = res.find("glob", remote_host.name)[0]
    assert glob.status == "failed" and "comes from what a host returned" in glob.msg, res.tasks
    assert str(outside / "k.txt") not in str(res.tasks)
    assert res.find("ok", remote_host.name)[0].msg == "['x.cfg', 'y.cfg']"  # inside the playbook's files/: allowed


def test_an_unvaulted_file_is_decrypted_and_masked(project):
    from engine.parsing import vault

    password = project / "vault-pass"
    password.write_text("unvault-test-password\n")
    secret_file = project / "files" / "vaulted.txt"
    secret_file.write_text("unv4ulted-plaintext\n")
    encrypt = subprocess.run([str(required_ansible_tool("ansible-vault")), "encrypt", "--vault-password-file",
                              str(password), str(secret_file)], capture_output=True, text=True, timeout=120,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(project)})
    assert encrypt.returncode == 0, encrypt.stderr
    vault.use_password_file(str(password))
    try:
        tasks = [{"name": "n", "debug": {"msg": "{{ lookup('unvault', 'vaulted.txt') | length }}"}},
                 {"name": "show", "debug": {"msg": "{{ lookup('unvault', 'vaulted.txt') }}"}}]
        res = run_playbook(str(write_book(project, tasks)), inventory=INV)
    finally:
        vault.use_password_file(None)
    assert res.exit_code == 0, res.tasks
    assert res.find("n", "localhost")[0].msg == "20"  # the text as it is: its newline kept, as Ansible's unvault
    assert "unv4ulted" not in str(res.tasks) and "********" in res.find("show", "localhost")[0].msg
