"""lookup() and query()/q() in templates (engine/template/lookups.py): file, env, template, vars and first_found as
ansible-core gives them (compared with real ansible-playbook on the same files), real playbook runs for the trust
rules (a lookup's result is data; a path from a remote host's answer stays inside the playbook's and role's
folders, while the control node's own answer is its word; commands, the network and writes on the control node
refused by name, before any host when the name is written out), secrets masked, and every bad input one paragraph."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from engine.api import run_playbook
from tests.helpers import ROOT, required_ansible_tool

INV = {"all": {"hosts": {"localhost": {"ansible_connection": "local"}}}}
ENV_VALUE = "from the control node"
ROLE_TASKS = [
    {"name": "r0", "debug": {"msg": "{{ lookup('file', 'c.txt') | to_json }}"}},  # the role's files/ first
    {"name": "r1", "debug": {"msg": "{{ lookup('file', 'b.txt') | to_json }}"}},  # the role's, before the playbook's
    {"name": "r2", "debug": {"msg": "{{ lookup('file', 'a.txt') | to_json }}"}},  # the playbook's folder last
    {"name": "r3", "debug": {"msg": "{{ lookup('template', 'u.j2') | to_json }}"}},
    {"name": "r4", "debug": {"msg": "{{ lookup('first_found', 'c.txt') | to_json }}"}},  # the role's folder
    {"name": "r5", "debug": {"msg": "{{ lookup('first_found', 'a.txt') | to_json }}"}},
    {"name": "r6", "debug": {"msg": "{{ lookup('first_found', {'files': ['b.txt'], 'paths': ['files']}) | to_json }}"}},
    {"name": "r7", "debug": {"msg": "{{ lookup('file', 'files/c.txt') | to_json }}"}},
]
# (name, expression): each rendered by both tools, `| to_json`, on the same files and variables
EXPRESSIONS = [
    ("file", "lookup('file', 'a.txt')"),
    ("file lstrip", "lookup('file', 'a.txt', lstrip=true)"),
    ("file rstrip", "lookup('file', 'a.txt', rstrip=false)"),
    ("file files/ first", "lookup('file', 'b.txt')"),
    ("file several", "lookup('file', 'a.txt', 'b.txt')"),
    ("file query", "query('file', 'a.txt', 'b.txt')"),
    ("file q", "q('file', 'a.txt')"),
    ("file wantlist", "lookup('file', 'a.txt', wantlist=true)"),
    ("file absolute", "lookup('file', playbook_dir + '/b.txt')"),
    ("file written as files/", "lookup('file', 'files/b.txt')"),
    ("file is data", "lookup('file', 'curly.txt')"),
    ("file ignore", "lookup('file', 'nope.txt', errors='ignore')"),
    ("file ignore query", "query('file', 'nope.txt', errors='ignore')"),
    ("file fqcn", "lookup('ansible.builtin.file', 'a.txt')"),
    ("env", "lookup('env', 'DFP_LOOKUP_TEST')"),
    ("env unset", "lookup('env', 'DFP_LOOKUP_UNSET')"),
    ("env default", "lookup('env', 'DFP_LOOKUP_UNSET', default='fallback')"),
    ("env several", "lookup('env', 'DFP_LOOKUP_TEST', 'DFP_LOOKUP_UNSET')"),
    ("env query", "query('env', 'DFP_LOOKUP_TEST', 'DFP_LOOKUP_UNSET')"),
    ("vars", "lookup('vars', 'ref')"),
    ("vars several", "lookup('vars', 'ids', 'ref')"),
    ("vars strings", "lookup('vars', 'word', 'word')"),
    ("vars default", "lookup('vars', 'nope', default='dflt')"),
    ("vars built name", "lookup('vars', 'wo' + 'rd')"),
    ("template", "lookup('template', 't.j2')"),
    ("template one expression", "lookup('template', 'n.j2')"),
    ("template in templates/", "lookup('template', 'u.j2')"),
    ("template vars", "lookup('template', 'u.j2', template_vars={'ids': 'given'})"),
    ("template reads a lookup", "lookup('template', 'reads.j2')"),
    ("first_found", "lookup('first_found', ['nope.txt', 'a.txt'])"),
    ("first_found names", "lookup('first_found', 'nope.txt', 'b.txt')"),
    ("first_found mapping", "lookup('first_found', {'files': ['nope.txt', 'b.txt'], 'paths': ['files']})"),
    ("first_found options", "lookup('first_found', files=['b.txt'], paths=['files', '.'])"),
    ("first_found absolute", "lookup('first_found', [playbook_dir + '/nope', playbook_dir + '/a.txt'])"),
    ("first_found skip", "lookup('first_found', 'nope.txt', skip=true)"),
    ("first_found query", "query('first_found', 'nope.txt', 'a.txt')"),
    ("first_found ignore", "lookup('first_found', 'nope.txt', errors='ignore')"),
    ("template one expression ending a line", "lookup('template', 'nl.j2')"),
    ("template one text expression ending a line", "lookup('template', 'nlword.j2')"),
]


@pytest.fixture
def project(tmp_path):
    """A playbook folder with files/, templates/ and a role r (our tasks.yaml and Ansible's tasks/main.yml)."""
    for folder in ("files", "templates", "roles/r/files", "roles/r/templates", "roles/r/tasks"):
        (tmp_path / folder).mkdir(parents=True)
    files = {
        "a.txt": "  hello\n\n", "b.txt": "playbook root\n", "files/b.txt": "playbook files\n",
        "files/curly.txt": "{{ 6 * 7 }} {% if true %}x{% endif %}\n", "t.j2": "x={{ ids }}\n", "n.j2": "{{ ids }}",
        "templates/u.j2": "u {{ ids }} {{ word }}\n", "templates/reads.j2": "[{{ lookup('file', 'b.txt') }}]\n",
        "roles/r/files/c.txt": "role files\n", "roles/r/c.txt": "role root\n", "roles/r/files/b.txt": "role b\n",
        "roles/r/templates/u.j2": "role u {{ ids }}\n",
        "templates/nl.j2": "{{ ids }}\n", "templates/nlword.j2": "{{ word }}\n\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for name in ("roles/r/tasks.yaml", "roles/r/tasks/main.yml"):
        (tmp_path / name).write_text(yaml.safe_dump(ROLE_TASKS, sort_keys=False))
    return tmp_path


def write_book(folder, tasks, vars=None, name="pb.yaml", **play):
    path = folder / name
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "vars": vars or {}, "tasks": tasks, **play}],
                                   sort_keys=False))
    return path


def run(folder, tasks, vars=None, inventory=INV, **play):
    return run_playbook(str(write_book(folder, tasks, vars, **play)), inventory=inventory)


def msg(res, task, host="localhost"):
    return res.find(task, host)[0].msg


def debug_tasks(expressions):
    return [{"name": f"t{i}", "debug": {"msg": f"{{{{ {expr} | to_json }}}}"}} for i, (_, expr) in enumerate(expressions)]


def ansible_messages(book, env_extra):
    """Each debug task's msg from real ansible-playbook, by task name, on the same playbook and inventory."""
    inv = book.parent / "inventory.yaml"
    inv.write_text(yaml.safe_dump(INV))
    env = {"PATH": "/usr/bin:/bin", "ANSIBLE_NOCOLOR": "1", "HOME": str(book.parent),
           "ANSIBLE_LOCAL_TEMP": str(book.parent / ".ansible-tmp"), "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
           **env_extra}
    proc = subprocess.run([str(required_ansible_tool("ansible-playbook")), "-i", str(inv), str(book)],
                          capture_output=True, text=True, timeout=180, cwd=book.parent, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {m.group(1): json.loads(m.group(2)) for m in
            re.finditer(r'TASK \[(?:r : )?(\w+)\].*?"msg": (".*?")\n', proc.stdout, re.S)}


VARS = {"ids": [1, 2], "ref": "{{ ids }}", "word": "plain"}


def test_lookups_give_what_ansible_gives_on_the_same_files(project, monkeypatch):
    monkeypatch.setenv("DFP_LOOKUP_TEST", ENV_VALUE)
    monkeypatch.delenv("DFP_LOOKUP_UNSET", raising=False)
    book = write_book(project, debug_tasks(EXPRESSIONS), VARS)
    theirs = ansible_messages(book, {"DFP_LOOKUP_TEST": ENV_VALUE})
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, [t["msg"] for t in res.tasks if t["status"] == "failed"]
    for i, (label, expr) in enumerate(EXPRESSIONS):
        assert json.loads(msg(res, f"t{i}")) == json.loads(theirs[f"t{i}"]), (label, expr)
    assert json.loads(msg(res, "t0")) == "  hello"  # what the comparison holds, spelled out for a few
    assert json.loads(msg(res, "t10")) == "{{ 6 * 7 }} {% if true %}x{% endif %}"  # a file's text is never rendered
    assert json.loads(msg(res, "t25")) == [1, 2]  # a template of one expression keeps its type, as Ansible's
    assert json.loads(msg(res, f"t{len(EXPRESSIONS) - 2}")) == [1, 2]  # its one trailing newline aside


def test_a_roles_lookups_search_the_role_first_as_ansible(project):
    book = write_book(project, [{"import_role": {"name": "r"}}], VARS)
    theirs = ansible_messages(book, {})
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0, [t["msg"] for t in res.tasks if t["status"] == "failed"]
    ours = {t["name"]: json.loads(msg(res, t["name"])) for t in ROLE_TASKS}
    assert ours == {k: json.loads(v) for k, v in theirs.items()}
    assert ours["r0"] == "role files" and ours["r1"] == "role b" and ours["r2"] == "  hello"
    assert ours["r3"] == "role u [1, 2]\n" and ours["r4"] == str(project / "roles/r/c.txt")


@pytest.fixture
def vault_password(tmp_path):
    """A vault password file the engine uses for the test (as --vault-password-file), forgotten afterwards."""
    from engine.parsing import vault
    path = tmp_path / "vault-pass"
    path.write_text("lookup-test-password\n")
    vault.use_password_file(str(path))
    yield path
    vault.use_password_file(None)


def test_a_vault_encrypted_file_is_decrypted_as_ansible_does_and_masked(project, vault_password):
    secret_file = project / "files" / "vaulted.txt"
    secret_file.write_text("v4ulted-plaintext\n")
    encrypt = subprocess.run([str(required_ansible_tool("ansible-vault")), "encrypt", "--vault-password-file",
                              str(vault_password), str(secret_file)], capture_output=True, text=True, timeout=120,
                             env={"PATH": "/usr/bin:/bin", "HOME": str(project)})
    assert encrypt.returncode == 0 and "v4ulted" not in secret_file.read_text(), encrypt.stderr
    book = write_book(project, debug_tasks([("vault", "lookup('file', 'vaulted.txt') | length")]))
    theirs = ansible_messages(book, {"ANSIBLE_VAULT_PASSWORD_FILE": str(vault_password)})
    res = run_playbook(str(book), inventory=INV)
    assert res.exit_code == 0 and json.loads(msg(res, "t0")) == json.loads(theirs["t0"]) == 17, res.tasks
    shown = run(project, [{"name": "show", "debug": {"msg": "{{ lookup('file', 'vaulted.txt') }}"}}])
    assert msg(shown, "show") == "********", msg(shown, "show")


def test_first_found_also_looks_in_files_as_ansible_before_2_19_did(project):
    (project / "files" / "only-in-files.txt").write_text("x")
    res = run(project, [{"name": "t", "debug": {"msg": "{{ lookup('first_found', ['nope', 'only-in-files.txt']) }}"}}])
    assert res.exit_code == 0 and msg(res, "t") == str(project / "files" / "only-in-files.txt"), res.tasks


def test_a_template_task_and_a_variable_use_lookups_and_the_text_stays_data(project, tmp_path):
    (project / "templates" / "app.conf.j2").write_text("motd={{ lookup('file', 'curly.txt') }}\nenv={{ from_env }}\n")
    dest = project / "out" / "app.conf"
    dest.parent.mkdir()
    res = run(project, [
        {"name": "conf", "template": {"src": "app.conf.j2", "dest": str(dest)}},
        {"name": "keep", "set_fact": {"kept": "{{ lookup('file', 'curly.txt') }}"}},
        {"name": "show", "debug": {"msg": "{{ kept }}|{{ motd }}"}},
    ], {"from_env": "{{ lookup('env', 'DFP_LOOKUP_UNSET', default='d') }}", "motd": "{{ lookup('file', 'curly.txt') }}"})
    assert res.exit_code == 0, res.tasks
    assert dest.read_text() == "motd={{ 6 * 7 }} {% if true %}x{% endif %}\nenv=d\n"
    curly = "{{ 6 * 7 }} {% if true %}x{% endif %}"
    assert msg(res, "show") == f"{curly}|{curly}"  # neither the set_fact value nor the variable was rendered again


# -- the trust rules ---------------------------------------------------------------------------------------------


def test_a_files_text_never_runs_and_a_looked_up_template_stays_in_the_sandbox(project):
    marker = project / "pwned"
    payload = ("{% for c in ''.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == 'catch_warnings' %}"
               f"{{{{ c()._module.__builtins__['__import__']('os').system('touch {marker}') }}}}{{% endif %}}{{% endfor %}}")
    (project / "files" / "evil.txt").write_text(payload)
    (project / "templates" / "evil.j2").write_text(payload)
    res = run(project, [
        {"name": "read", "debug": {"msg": "{{ lookup('file', 'evil.txt') }}"}},
        {"name": "kept", "set_fact": {"kept": "{{ lookup('file', 'evil.txt') }}"}},
        {"name": "shown", "debug": {"msg": "{{ kept }}"}},
        {"name": "render", "debug": {"msg": "{{ lookup('template', 'evil.j2') }}"}, "ignore_errors": True},
    ])
    assert msg(res, "read") == msg(res, "shown") == payload
    assert "sandbox refused" in msg(res, "render") and not marker.exists(), msg(res, "render")



def ask(answer):
    return {"name": "ask", "command": {"argv": ["echo", answer]}, "register": "where"}


OUTSIDE_ANSWERS = ["/etc/hostname", "../../../../../../../../etc/hostname", "~/.bashrc"]


@pytest.mark.ssh
def test_a_path_from_a_hosts_answer_cannot_leave_the_playbooks_folders(project, remote_host):
    """Lookups read on the control node: a remote host's answer naming a file outside the folders is refused."""
    reads = [(kind, i) for kind in ("file", "first_found") for i in range(len(OUTSIDE_ANSWERS))]
    res = run(project, [
        {"name": "ask", "command": {"argv": ["printf", "%s\\n", *OUTSIDE_ANSWERS]}, "register": "where"},
        *({"name": f"{kind}{i}", "debug": {"msg": f"{{{{ lookup('{kind}', where.stdout_lines[{i}]) }}}}"},
           "ignore_errors": True} for kind, i in reads),
    ], inventory=remote_host.inventory)
    for kind, i in reads:
        read = res.find(f"{kind}{i}", remote_host.name)[0]
        assert read.status == "failed" and "comes from what a host returned" in read.msg, (OUTSIDE_ANSWERS[i], read.msg)
        assert "pb.yaml" in read.msg and f"('{kind}{i}')" in read.msg and f"lookup('{kind}')" in read.msg


def test_the_control_nodes_own_answer_names_any_file_and_variable(project, monkeypatch):
    """A local host is the control node: its answer is its own word, as a path the playbook wrote."""
    monkeypatch.setenv("DFP_LOOKUP_TEST", ENV_VALUE)
    outside = project.parent / f"{project.name}-mine.txt"
    outside.write_text("mine\n")
    res = run(project, [
        {"name": "ask", "command": {"argv": ["printf", "%s\\n", str(outside), "DFP_LOOKUP_TEST"]}, "register": "where"},
        {"name": "read", "debug": {"msg": "{{ lookup('file', where.stdout_lines[0]) }}"}},
        {"name": "env", "debug": {"msg": "{{ lookup('env', where.stdout_lines[1]) }}"}},
    ])
    assert res.exit_code == 0, res.tasks
    assert msg(res, "read") == "mine" and msg(res, "env") == ENV_VALUE


@pytest.mark.ssh
def test_a_symlink_out_of_the_folders_is_refused_for_a_hosts_path_but_the_playbooks_own(project, remote_host):
    (project / "files" / "link.txt").symlink_to("/etc/hostname")
    res = run(project, [
        ask("link.txt"),
        {"name": "from the host", "debug": {"msg": "{{ lookup('file', where.stdout | trim) }}"}, "ignore_errors": True},
        {"name": "written out", "debug": {"msg": "{{ lookup('file', 'link.txt') }}"}},
    ], inventory=remote_host.inventory)
    bad = res.find("from the host", remote_host.name)[0]
    assert bad.status == "failed" and "it leads to /etc/hostname" in bad.msg, bad.msg
    assert msg(res, "written out", remote_host.name) == open("/etc/hostname").read().rstrip()


@pytest.mark.ssh
def test_host_data_through_set_fact_variables_and_loops_is_followed(project, remote_host):
    outside = project.parent / f"{project.name}-outside.txt"
    outside.write_text("outside\n")
    res = run(project, [
        ask(str(outside)),
        {"name": "keep", "set_fact": {"kept": "{{ where.stdout | trim }}"}},
        {"name": "via set_fact", "debug": {"msg": "{{ lookup('file', kept) }}"}, "ignore_errors": True},
        {"name": "via a variable", "debug": {"msg": "{{ lookup('file', indirect) }}"}, "ignore_errors": True},
        {"name": "via vars", "debug": {"msg": "{{ lookup('file', lookup('vars', 'kept')) }}"}, "ignore_errors": True},
        {"name": "via a loop", "debug": {"msg": "{{ lookup('file', item) }}"}, "loop": "{{ where.stdout.split() }}",
         "ignore_errors": True},
        {"name": "via a template loop", "debug": {"msg": "{% for p in where.stdout.split() %}{{ lookup('file', p) }}"
                                                         "{% endfor %}"}, "ignore_errors": True},
        {"name": "a literal loop", "debug": {"msg": "{{ lookup('file', item) }}"}, "loop": [str(outside)]},
        {"name": "a playbook variable", "debug": {"msg": "{{ lookup('file', mine) }}"}},
        {"name": "inside, from the host", "debug": {"msg": "{{ lookup('file', 'files/' + (where.stdout | basename)) }}"},
         "ignore_errors": True},
    ], {"indirect": "{{ kept }}", "mine": str(outside)}, inventory=remote_host.inventory)
    host = remote_host.name
    for name in ("via set_fact", "via a variable", "via vars", "via a template loop"):
        assert "comes from what a host returned" in msg(res, name, host), (name, msg(res, name, host))
    assert "comes from what a host returned" in msg(res, "via a loop", host)
    assert res.find("a literal loop", host)[0].result["results"][0]["msg"] == "outside"
    assert msg(res, "a playbook variable", host) == "outside"
    assert "no file" in msg(res, "inside, from the host", host)  # allowed (inside), only missing


@pytest.mark.ssh
def test_a_template_named_by_a_host_is_never_rendered(project, remote_host):
    res = run(project, [ask("u.j2"), {"name": "render", "debug": {"msg": "{{ lookup('template', where.stdout | trim) }}"}}],
              inventory=remote_host.inventory)
    render = res.find("render", remote_host.name)[0]
    assert render.status == "failed" and "only a template the playbook names is rendered" in render.msg, render.msg


@pytest.mark.ssh
def test_a_hosts_answer_cannot_choose_an_environment_variable(project, monkeypatch, remote_host):
    monkeypatch.setenv("DFP_LOOKUP_TEST", ENV_VALUE)
    res = run(project, [ask("DFP_LOOKUP_TEST"), {"name": "env", "debug": {"msg": "{{ lookup('env', where.stdout | trim) }}"}}],
              inventory=remote_host.inventory)
    env = res.find("env", remote_host.name)[0]
    assert env.status == "failed" and "a host may not choose" in env.msg and ENV_VALUE not in env.msg
@pytest.mark.parametrize("name,needle", [
    ("pipe", "would run a command on the control node"), ("lines", "would run a command on the control node"),
    ("url", "would reach the network"), ("password", "would create and write files"),
    ("ansible.builtin.pipe", "would run a command"), ("community.general.redis", "is not a lookup dflash-provision has"),
    ("csvfile", "is not a lookup dflash-provision has"),
])
def test_refused_lookups_fail_their_task_when_it_renders(project, name, needle):
    marker = project / "touched"
    res = run(project, [
        {"name": "would touch", "file": {"path": str(marker), "state": "directory"}},
        {"name": "uses it", "debug": {"msg": f"{{{{ lookup('{name}', 'touch {marker}-by-pipe') }}}}"}},
    ])
    uses = res.find("uses it", "localhost")[0]
    assert res.exit_code == 2 and uses.status == "failed", res.tasks
    assert needle in uses.msg and f"lookup('{name}')" in uses.msg and "pb.yaml: task 2 ('uses it')" in uses.msg
    assert marker.exists() and not (project / "touched-by-pipe").exists()


def test_a_refused_lookup_in_a_skipped_or_ignored_task_does_not_stop_the_run(project):
    marker = project / "touched-by-pipe"
    res = run(project, [
        {"name": "skipped", "debug": {"msg": f"{{{{ lookup('pipe', 'touch {marker}') }}}}"}, "when": False},
        {"name": "ignored", "debug": {"msg": f"{{{{ lookup('pipe', 'touch {marker}') }}}}"}, "ignore_errors": True},
        {"name": "after", "debug": {"msg": "ran"}},
    ])
    assert res.exit_code == 0 and res.find("ignored", "localhost")[0].status == "failed", res.tasks
    assert res.find("after", "localhost")[0].status == "ok" and not marker.exists()


def test_a_refused_lookup_in_a_variable_the_task_reads_fails_that_task(project):
    marker = project / "touched"
    res = run(project, [
        {"name": "would touch", "file": {"path": str(marker), "state": "directory"}},
        {"name": "uses it", "debug": {"msg": "{{ who }}"}},
    ], {"who": "{{ query('pipe', 'id') }}"})
    uses = res.find("uses it", "localhost")[0]
    assert res.exit_code == 2 and "lookup('pipe') is refused" in uses.msg and marker.exists(), res.tasks


def test_a_lookup_name_computed_at_render_is_refused_there(project):
    marker = project / "touched-by-pipe"
    res = run(project, [{"name": "computed", "debug": {"msg": f"{{{{ lookup(kind, 'touch {marker}') }}}}"}}],
              {"kind": "pipe"})
    computed = res.find("computed", "localhost")[0]
    assert res.exit_code == 2 and computed.status == "failed", res.tasks
    assert computed.msg.startswith(f"{project / 'pb.yaml'}: task 1 ('computed'): lookup('pipe') is refused"), computed.msg
    assert not marker.exists()


@pytest.mark.ssh
def test_errors_ignore_never_hides_a_refusal(project, remote_host):
    res = run(project, [ask("/etc/hostname"),
                        {"name": "read", "debug": {"msg": "{{ lookup('file', where.stdout | trim, errors='ignore') }}"}}],
              inventory=remote_host.inventory)
    read = res.find("read", remote_host.name)[0]
    assert read.status == "failed" and "comes from what a host returned" in read.msg, read.msg


# -- secrets -----------------------------------------------------------------------------------------------------


def test_secrets_from_lookups_are_masked(project, monkeypatch):
    token, key, plain = "hf_env_s3cret_value", "k3y-from-a-plain-file", "p1ain-token-file-value"
    monkeypatch.setenv("HF_TOKEN", token)
    (project / "files" / "key.txt").write_text(key + "\n")
    (project / "files" / "api_token.txt").write_text(plain + "\n")
    res = run(project, [
        {"name": "env", "debug": {"msg": "token {{ lookup('env', 'HF_TOKEN') }}"}},
        {"name": "file named like a secret", "debug": {"msg": "{{ lookup('file', 'api_token.txt') }}"}},
        {"name": "into a secret-named variable", "debug": {"msg": "{{ lookup('file', 'key.txt') }}"}},
        {"name": "echo", "command": {"argv": ["echo", "{{ api_key }}", "{{ lookup('env', 'HF_TOKEN') }}"]},
         "register": "echoed"},
    ], {"api_key": "{{ lookup('file', 'key.txt') }}"})
    assert res.exit_code == 0, res.tasks
    shown = json.dumps(res.tasks) + json.dumps(res.registered)
    for value in (token, key, plain):
        assert value not in shown, value
    assert msg(res, "env") == "token ********"


def test_a_role_default_read_from_a_file_is_a_secret_when_named_like_one(project):
    (project / "roles" / "s" / "files").mkdir(parents=True)
    (project / "roles" / "s" / "files" / "tok.txt").write_text("r0le-default-s3cret\n")
    (project / "roles" / "s" / "defaults.yaml").write_text("hf_token: \"{{ lookup('file', 'tok.txt') }}\"\n")
    (project / "roles" / "s" / "tasks.yaml").write_text(yaml.safe_dump([
        {"name": "use", "command": {"argv": ["echo", "{{ hf_token }}"]}, "register": "used"}]))
    res = run(project, [{"import_role": {"name": "s"}}])
    assert res.exit_code == 0, res.tasks
    assert "r0le-default-s3cret" not in json.dumps(res.tasks) + json.dumps(res.registered)


# -- bounds and bad input ------------------------------------------------------------------------------------------


def test_a_looked_up_template_keeps_the_sandboxs_bounds_and_cannot_loop(project):
    (project / "templates" / "big.j2").write_text("{{ 'x' * 10000000 }}\n")
    (project / "templates" / "self.j2").write_text("{{ lookup('template', 'self.j2') }}\n")
    res = run(project, [
        {"name": "big", "debug": {"msg": "{{ lookup('template', 'big.j2') | length }}"}, "ignore_errors": True},
        {"name": "self", "debug": {"msg": "{{ lookup('template', 'self.j2') }}"}, "ignore_errors": True},
    ])
    assert "sandbox refuses" in msg(res, "big"), msg(res, "big")
    assert "nest deeper than" in msg(res, "self") and "self.j2" in msg(res, "self"), msg(res, "self")


@pytest.mark.parametrize("expr,needle", [
    ("lookup('file', 'nope.txt')", "no file 'nope.txt'; looked in"),
    ("lookup('file', 'files')", "is not a regular file"),
    ("lookup('file', 'bin.dat')", "is not UTF-8 text"),
    ("lookup('file', 'a.txt', bogus=1)", "it has no option bogus"),
    ("lookup('file', 'a.txt', rstrip='maybe')", "rstrip must be true or false"),
    ("lookup('file', ['a.txt'])", "each term must be a non-empty string"),
    ("lookup('file', 'a.txt', errors='loud')", "errors must be one of strict, warn, ignore"),
    ("lookup()", "lookup() needs the lookup's name first"),
    ("lookup('template', 'nope.j2')", "no template 'nope.j2'"),
    ("lookup('template', 'broken.j2')", "broken.j2"),
    ("lookup('template', 'u.j2', template_vars=[1])", "template_vars must be a mapping"),
    ("lookup('vars', 'nope')", "'nope' is undefined"),
    ("lookup('first_found', ['x', 'y'])", "none of ['x', 'y'] exists"),
    ("lookup('first_found', {'files': ['x'], 'where': 1})", "takes files, paths and skip, not where"),
    ("lookup('first_found', 3)", "a term must be a file name"),
])
def test_bad_lookups_fail_their_task_with_one_paragraph(project, expr, needle):
    (project / "files" / "bin.dat").write_bytes(b"\xff\xfe\x00")
    (project / "templates" / "broken.j2").write_text("{% if %}\n")
    res = run(project, [{"name": "bad", "debug": {"msg": f"{{{{ {expr} }}}}"}}])
    bad = res.find("bad", "localhost")[0]
    assert res.exit_code == 2 and bad.status == "failed", res.tasks
    # an undefined name fails with ansible-core 2.19's words ("Task failed: Finalization of task args ..."); the
    # console's Origin block names the task's place then
    placed = "pb.yaml: task 1 ('bad')" in bad.msg or bad.msg.startswith("Task failed: Finalization of task args")
    assert needle in bad.msg and placed and "Traceback" not in bad.msg, bad.msg
    assert "\n" not in bad.msg.strip()


def test_the_cli_prints_a_refusal_as_one_paragraph(project):
    book = write_book(project, [{"name": "uses pipe", "debug": {"msg": "{{ lookup('pipe', 'id') }}"}}])
    inv = project / "inv.yaml"
    inv.write_text(yaml.safe_dump(INV))
    proc = subprocess.run([sys.executable, "-m", "invoke", "play", str(book), "-i", str(inv)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    assert "('uses pipe'): lookup('pipe') is refused" in out and "`command` task" in out, out
