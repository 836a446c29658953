"""command and shell options as ansible-core's command_shell target uses them, run by real ansible-playbook and
by ours on a local host: executable's warning, a missing or doubled command (Ansible's words), argv,
expand_argument_vars (off: `$TEST` stays; on shell: the task fails with Ansible's words), strip_empty_ends,
stdin. Both must pass every assert, with the same recap."""

from __future__ import annotations

from tests.engine.playbook.ansible_side import ansible, ours, write

TASKS = [
    {"name": "executable", "command": "ls /dev/null", "args": {"executable": "/bogus"}, "register": "r"},
    {"assert": {"that": ["r.stdout == '/dev/null'", "r.warnings | length == 1",
                         "'no longer supported' in r.warnings[0]"]}},
    {"name": "no command", "command": None, "args": {"chdir": "/"}, "register": "r", "ignore_errors": True},
    {"assert": {"that": ["r is failed", "r.msg is contains 'one of the following is required'"]}},
    {"name": "argv", "command": {"argv": ["echo", "testing"]}, "register": "r"},
    {"assert": {"that": ["r.stdout == 'testing'"]}},
    {"name": "both", "command": "echo testing", "args": {"argv": ["echo", "testing"]}, "register": "r",
     "ignore_errors": True},
    {"assert": {"that": ["r is failed", "r.msg is contains 'parameters are mutually exclusive'"]}},
    {"name": "no expansion", "command": "/bin/sh -c 'echo \"\\$TEST\"'", "args": {"expand_argument_vars": False},
     "environment": {"TEST": "z"}, "register": "r"},
    {"assert": {"that": ["r.stdout == '$TEST'"]}},
    {"name": "strip", "shell": "printf 'hello \\n \\n\\n'; printf 'x \\n\\n' >&2", "register": "s1"},
    {"name": "no strip", "shell": "printf 'hello \\n \\n\\n'", "args": {"strip_empty_ends": False}, "register": "s2"},
    {"assert": {"that": ["s1.stdout == 'hello \\n '", "s1.stderr == 'x '", "s2.stdout == 'hello \\n \\n\\n'"]}},
    {"name": "stdin", "command": "cat", "args": {"stdin": "in", "stdin_add_newline": False}, "register": "r"},
    {"assert": {"that": ["r.stdout == 'in'"]}},
    {"name": "shell expand", "shell": "echo hi", "args": {"expand_argument_vars": False}, "register": "r",
     "ignore_errors": True},
    {"assert": {"that": ["r is failed",
                         "r.msg == 'Unsupported parameters for (shell) module: expand_argument_vars'"]}},
]


def test_command_and_shell_options_as_ansible_playbook(tmp_path):
    pb = write(tmp_path / "pb.yaml", [{"hosts": "all", "gather_facts": False, "tasks": TASKS}])
    theirs, mine = ansible(pb), ours(pb)
    assert theirs[0] == 0 and theirs[2]["ignored"] == 3, theirs
    assert (mine[0], mine[1], mine[2]) == (theirs[0], theirs[1], theirs[2])
