"""command and shell as Ansible users write them: the one-line form with trailing options (creates=, chdir=),
`args:`, ansible.builtin names; and the trust rule on shell: a shell command built from what a host returned is
refused (registered), while one from the playbook's own values, inventory variables or a literal loop runs."""

from __future__ import annotations

import pytest
import yaml

from engine.api import run_playbook

INV = {"all": {"hosts": {"h": {"ansible_connection": "local", "greeting": "hi there"}}}}


def run(tmp_path, tasks):
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    return run_playbook(str(path), inventory=INV)


def test_the_one_line_forms_and_args(tmp_path):
    (tmp_path / "d").mkdir()
    tasks = [
        {"name": "line", "command": "printf '%s|' 'a b' c creates=/nonexistent-dfp", "register": "line"},
        {"name": "skipped", "ansible.builtin.command": f"touch x creates={tmp_path}", "register": "skipped"},
        {"name": "args", "command": "pwd", "args": {"chdir": str(tmp_path / "d")}, "register": "where"},
        {"name": "pipe", "ansible.builtin.shell": "echo $((1 + 2)) | tr 3 X chdir=/tmp", "register": "pipe"},
        {"name": "vars", "shell": "echo '{{ greeting }}' {{ item }}", "loop": ["one", "two"], "register": "lit"},
    ]
    res = run(tmp_path, tasks)
    assert res.exit_code == 0, res.tasks
    reg = res.registered["h"]
    assert reg["line"]["stdout"] == "a b|c|" and reg["line"]["cmd"] == ["printf", "%s|", "a b", "c"]
    assert reg["skipped"]["changed"] is False and reg["skipped"]["msg"] == f"Did not run command since '{tmp_path}' exists"
    assert reg["where"]["stdout"] == str(tmp_path / "d")
    assert reg["pipe"]["stdout"] == "X"
    assert [r["stdout"] for r in reg["lit"]["results"]] == ["hi there one", "hi there two"]


@pytest.mark.ssh
def test_a_shell_command_built_from_host_data_is_refused_and_registered_failed(tmp_path, ssh_host, inventory_file,
                                                                              shared_tmp):
    marker = shared_tmp / "ran"
    inv = inventory_file(hosts=[ssh_host], host_vars={ssh_host.name: {"dfp_root": str(shared_tmp / "root")}})
    tasks = [
        {"name": "probe", "command": {"argv": ["echo", f"touch {marker}"]}, "register": "probe"},
        {"name": "from host", "shell": "{{ probe.stdout }}", "register": "bad", "ignore_errors": True},
        {"name": "via loop", "shell": "{{ item }}", "loop": "{{ probe.stdout_lines }}", "ignore_errors": True},
        {"name": "via a variable", "shell": "{{ indirect }}", "vars": {"indirect": "{{ probe.stdout }}"},
         "ignore_errors": True},
        {"name": "as argv", "command": {"argv": ["sh", "-c", 'test -n "$1"', "sh", "{{ probe.stdout }}"]}},
        {"name": "seen", "debug": {"msg": "{{ bad is failed }}"}},
    ]
    path = tmp_path / "pb.yaml"
    path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    res = run_playbook(str(path), inventory=str(inv))
    assert res.exit_code == 0, res.tasks
    for name, needle in (("from host", "(probe from "), ("via loop", "(item from "), ("via a variable", "(probe from ")):
        msg = next(r.msg for r in res.find(name))
        assert f"the shell cmd is built from what a host returned {needle}" in msg and "argv" in msg, msg
    assert not marker.exists()  # nothing ran the host's words
    assert next(r.msg for r in res.find("seen")) == "True"
    assert next(r.status for r in res.find("as argv")) == "changed"  # host data as an argument is fine


def test_the_control_nodes_own_answer_may_build_its_shell_line(tmp_path):
    """A local host is the control node: its own output is its own word (engine/run/trust.py answer_taint)."""
    marker = tmp_path / "ran"
    res = run(tmp_path, [
        {"name": "probe", "command": {"argv": ["echo", f"touch {marker}"]}, "register": "probe"},
        {"name": "from here", "shell": "{{ probe.stdout }}"},
    ])
    assert res.exit_code == 0 and marker.exists(), res.tasks


ONE_LINE_FORMS = [  # each one-line command/shell string, as written in a playbook
    'echo this is a \\\n"multiline echo" \\\n"with a new\nline" \\\n| cat\necho "second line"\n',  # continuations
    'executable="/bin/bash"\ncreates=/nonexistent-dfp\necho "test"\n',  # options on their own lines
    "creates=/nonexistent-dfp echo  two   spaces  ",  # an option first, runs of spaces kept
    "echo a=b c\\=d chdir=/tmp",  # a k=v that is no option stays in the line
]


def test_the_one_line_form_gives_cmd_as_ansible_playbook(tmp_path):
    """Ansible reads `- shell: LINE` with its parse_kv: the options anywhere in it, line breaks kept, a backslash
    line continuation dropped; its result's `cmd` is what remains, which ours must report the same."""
    from tests.engine.playbook.ansible_side import ansible, ours, write

    tasks = []
    for number, line in enumerate(ONE_LINE_FORMS):
        tasks += [{"name": f"t{number}", "shell": line, "register": "r"},
                  {"debug": {"msg": "{{ r.cmd }}|{{ r.stdout }}"}}]
    pb = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": tasks}])
    theirs, mine = ansible(pb), ours(pb)
    assert theirs[0] == 0 and len(theirs[3]) == len(ONE_LINE_FORMS), theirs
    assert mine[3] == theirs[3]
