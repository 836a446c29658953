"""A playbook's own Ansible module (library/NAME.py beside the playbook, or in a role) runs as in Ansible: its
AnsibleModule checks the arguments (types, defaults, choices, aliases, required, unknown ones) with ansible-core's
messages, check mode without support skips, no_log values are masked in the result, run_command runs; compared
with real ansible-playbook. A module this tool cannot run (another language, an old-style one, module_utils it
does not provide) is refused at load, naming its file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflash_host.ansible_modules import COMPAT
from engine.api import run_playbook
from engine.playbook.user_modules import PROVIDED
from tests.engine.playbook import ansible_side
from tests.engine.playbook.ansible_side import local_inventory, write

HELLO = '''#!/usr/bin/python
from __future__ import annotations
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text


def main():
    module = AnsibleModule(argument_spec=dict(
        name=dict(type='str', required=True, aliases=['who']),
        greeting=dict(type='str', default='Hello', choices=['Hello', 'Hi']),
        loud=dict(type='bool', default=False),
        count=dict(type='int', default=1),
        secret=dict(type='str', no_log=True),
        names=dict(type='list', elements='str'),
    ), supports_check_mode=True)
    p = module.params
    rc, out, err = module.run_command(['echo', p['name']])
    msg = to_text('%s, %s!' % (p['greeting'], p['name']))
    if p['secret'] == 'fail':
        module.fail_json(msg='asked to fail', rc=3)
    module.exit_json(changed=p['loud'] and not module.check_mode, msg=msg * p['count'], echoed=out.strip(), rc=rc, said='the secret is ' + str(p['secret']),
                     names=p['names'], check=module.check_mode)


if __name__ == '__main__':
    main()
'''

NOCHECK = '''from ansible.module_utils.basic import AnsibleModule
AnsibleModule(argument_spec={}).exit_json(changed=True, msg='ran')
'''

ROLE_MODULE = '''from ansible.module_utils.basic import AnsibleModule
m = AnsibleModule(argument_spec=dict(x=dict(type='raw')))
m.exit_json(changed=False, got=m.params['x'])
'''

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  tasks:
    - hello: who=World loud=yes count=2 names=a,b
      register: r
    - debug:
        msg: "{{ r.msg }}|{{ r.changed }}|{{ r.echoed }}|{{ r.names }}"
    - hello: {name: X, greeting: Bad}
      register: r
      ignore_errors: true
    - debug: {msg: "{{ r.msg }}"}
    - hello: {}
      register: r
      ignore_errors: true
    - debug: {msg: "{{ r.msg }}"}
    - hello: {name: X, bogus: 1}
      register: r
      ignore_errors: true
    - debug: {msg: "{{ r.msg }}"}
    - hello: {name: X, count: many}
      register: r
      ignore_errors: true
    - debug: {msg: "failed={{ r.failed }}"}
    - hello: {name: X, secret: hush, loud: true}
      register: r
      check_mode: true
    - debug: {msg: "{{ r.said }}|{{ r.changed }}|{{ r.check }}"}
    - hello: {name: X, secret: fail}
      register: r
      ignore_errors: true
    - debug: {msg: "{{ r.msg }}|{{ r.rc }}"}
    - nocheck:
      register: r
      check_mode: true
    - debug: {msg: "{{ r.skipped }}|{{ r.msg }}"}
    - import_role: {name: withlib}
"""

ROLE_TASKS = """\
- role_mod: {x: [1, 2]}
  register: r
- debug: {msg: "got={{ r.got }}"}
"""


def _layout(folder: Path) -> Path:
    write(folder / "library" / "hello.py", HELLO)
    write(folder / "library" / "nocheck.py", NOCHECK)
    write(folder / "roles" / "withlib" / "library" / "role_mod.py", ROLE_MODULE)
    write(folder / "roles" / "withlib" / "tasks" / "main.yml", ROLE_TASKS)
    return write(folder / "pb.yml", PLAYBOOK)


def test_a_playbooks_own_module_runs_as_in_ansible(tmp_path):
    theirs = ansible_side.ansible(_layout(tmp_path / "a"))
    ours = ansible_side.ours(_layout(tmp_path / "o"))
    assert ours[3] == theirs[3]  # every debug message
    assert ours[2] == theirs[2] and ours[0] == theirs[0]  # the recap and the exit code
    assert "Hello, World!Hello, World!|True|World|['a', 'b']" in ours[3]


@pytest.mark.parametrize(("name", "text", "said"), [
    ("shellmod.sh", "#!/bin/sh\necho '{}'\n", "is not a Python module"),
    ("oldstyle.py", "import json\nprint(json.dumps({'changed': False}))\n", "does not import ansible.module_utils"),
    ("usessix.py", "from ansible.module_utils.six import PY3\n", "imports ansible.module_utils.six, which"),
    ("usesname.py", "from ansible.module_utils.basic import get_platform\n", "ansible.module_utils.basic.get_platform"),
])
def test_a_module_this_tool_cannot_run_is_refused_at_load(tmp_path, name, text, said):
    write(tmp_path / "library" / name, text)
    pb = write(tmp_path / "pb.yml", f"- hosts: all\n  gather_facts: false\n  tasks:\n    - {name.split('.')[0]}:\n")
    res = run_playbook(pb, local_inventory(tmp_path))
    assert res.exit_code == 4 and said in res.error and str(tmp_path / "library" / name) in res.error, res.error


def test_a_module_of_another_playbook_is_forgotten(tmp_path):
    write(tmp_path / "one" / "library" / "hello.py", HELLO)
    run_playbook(write(tmp_path / "one" / "pb.yml", "- hosts: all\n  gather_facts: false\n  tasks: []\n"),
                 local_inventory(tmp_path))
    pb = write(tmp_path / "two" / "pb.yml", "- hosts: all\n  gather_facts: false\n  tasks:\n    - hello: {name: x}\n")
    res = run_playbook(pb, local_inventory(tmp_path))
    assert res.exit_code == 4 and "unknown module 'hello'" in res.error, res.error


def test_the_stand_in_provides_what_the_load_check_lets_through():
    names = [f"from {module} import {name}" for module, provided in PROVIDED.items() for name in sorted(provided)]
    env = dict(os.environ, PYTHONPATH=COMPAT)
    proc = subprocess.run([sys.executable, "-c", "\n".join(names)], capture_output=True, text=True, env=env,
                          cwd=COMPAT)
    assert proc.returncode == 0, proc.stderr
