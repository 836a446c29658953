"""import_role's delegate_to reaches the role's tasks and handlers (with `ansible_delegated_vars`), a vars_from that
is no string is refused with ansible-core's words, and a templated `action: {module: "{{ x }}"}` loads (Ansible
resolves it when the task runs; a `never`-tagged one never does): compared with real ansible-playbook."""

from __future__ import annotations

from engine.api import run_playbook
from tests.engine.playbook import ansible_side
from tests.engine.playbook.ansible_side import local_inventory, real_ansible_playbook, write

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  vars:
    entire_task: {include_role: {name: deleg}}
  tasks:
    - import_role: {name: deleg}
      delegate_to: localhost
    - name: never runs
      action:
        module: "{{ entire_task }}"
      tags: [never]
"""
ROLE_TASKS = """\
- debug: {msg: "delegated={{ ansible_delegated_vars is defined }}"}
- command: "true"
  notify: delegated handler
"""
ROLE_HANDLERS = """\
- name: delegated handler
  debug: {msg: "handler delegated={{ ansible_delegated_vars is defined }}"}
"""


def _layout(folder):
    write(folder / "roles" / "deleg" / "tasks" / "main.yml", ROLE_TASKS)
    write(folder / "roles" / "deleg" / "handlers" / "main.yml", ROLE_HANDLERS)
    return write(folder / "pb.yml", PLAYBOOK)


def test_import_role_delegate_to_reaches_tasks_and_handlers(tmp_path):
    ours = ansible_side.same_as_ansible(_layout(tmp_path / "pb"))
    assert "handler delegated=True" in ours[3]


def test_a_vars_from_list_is_refused_with_ansibles_words(tmp_path):
    write(tmp_path / "roles" / "r" / "tasks" / "main.yml", "- debug: {msg: hi}\n")
    write(tmp_path / "roles" / "r" / "vars" / "v.yml", "a: 1\n")
    pb = write(tmp_path / "pb.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n"
                                    "    - include_role: {name: r, vars_from: [v.yml]}\n")
    inv = local_inventory(tmp_path)
    words = "Expected a string for vars_from but got"
    proc = real_ansible_playbook(pb, inv)
    assert words in proc.stdout + proc.stderr
    res = run_playbook(pb, inv)
    assert res.exit_code == 4 and words in res.error, res.error


TWO_HOSTS = "h1 ansible_connection=local ansible_python_interpreter={py}\nh2 ansible_connection=local ansible_python_interpreter={py}\n"
RUN_ONCE = """\
- hosts: all
  gather_facts: false
  vars: {lola: untouched}
  tasks:
    - include_tasks: {file: inc.yml, apply: {run_once: true}}
      run_once: true
    - assert: {that: ["lola == 'wiseman'"]}
- hosts: all
  gather_facts: false
  vars: {lola2: untouched}
  tasks:
    - include_tasks: inc2.yml
      run_once: true
    - assert: {that: ["lola2 == ('wiseman' if inventory_hostname == ansible_play_hosts[0] else 'untouched')"]}
- hosts: all
  gather_facts: false
  tasks:
    - assert: {that: [x is undefined]}
    - include_role: {name: pub, public: "{{ True | bool }}"}
    - assert: {that: [x == 'from defaults']}
    - import_tasks: checked.yml
      check_mode: true
    - assert: {that: [r is skipped]}
- hosts: all
  gather_facts: false
  tasks:
    - import_role: {name: pub, allow_duplicates: "{{ False | bool }}"}
    - import_role: {name: pub, allow_duplicates: "{{ False | bool }}"}
    - include_role: {name: pub, tasks_from: "{{ omit }}"}
"""


def _recaps(out: str) -> dict:
    import re
    tail = out.rpartition("PLAY RECAP")[2]
    return {h: dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", rest))
            for h, rest in re.findall(r"^(h\d)\s*:\s*(.*)$", tail, re.M)}


def test_run_once_include_public_role_and_import_flags_as_in_ansible(tmp_path):
    import sys
    write(tmp_path / "inc.yml", "- set_fact: {lola: wiseman}\n")
    write(tmp_path / "inc2.yml", "- set_fact: {lola2: wiseman}\n")
    write(tmp_path / "checked.yml", "- command: 'true'\n  register: r\n")
    write(tmp_path / "roles" / "pub" / "defaults" / "main.yml", "x: from defaults\n")
    write(tmp_path / "roles" / "pub" / "tasks" / "main.yml", "- debug: {msg: pub}\n")
    pb = write(tmp_path / "pb.yml", RUN_ONCE)
    inv = write(tmp_path / "inv", TWO_HOSTS.format(py=sys.executable))
    proc = real_ansible_playbook(pb, inv, {"ANSIBLE_GATHERING": "explicit"})
    theirs = _recaps(proc.stdout)
    assert proc.returncode == 0 and theirs, proc.stdout + proc.stderr
    res = run_playbook(pb, inv)
    ours = {h: {k: int(v) for k, v in counts.items() if k in theirs[h]} for h, counts in res.recap.items()}
    assert res.exit_code == 0 and ours == theirs, (res.error, ours, theirs)
