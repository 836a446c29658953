"""Run a shell command line (`executable -c cmd`, /bin/sh by default) unless its result already exists: Ansible's
shell, for pipes, redirections, globs and `&&`; the line is the playbook's own words, never built from host data.

ansible.builtin.shell's options and result, with command's own additions (library/command.py): one module runs
the program for both (dflash_host/host/commands.py), so creates/removes, check mode, `check_safe`, `stdin`,
`strip_empty_ends`, `env`, `timeout_s`, `expect_rc`, the messages and the result fields are command's, and so
are the differences from Ansible that its docstring lists. Ansible's one-line form
`- shell: cat /x | wc -l creates=/y` gives `cmd` (and the options written in it, as Ansible reads them).

The shell string is the playbook's word. A shell parses `cmd` as code, so what it says must come from the
playbook and its variables, never from what a host returned: the engine refuses a `cmd` (or `executable`)
rendered from facts, registered results, hostvars or set_fact values before anything runs (engine/run/task_executor.py,
CODE_ARGS); pass such a value as an argument instead, with command's `argv`, which no shell parses. A variable
in the line is still spliced in as shell code: quote it (`{{ path | quote }}`).

Result: command's fields, with `cmd` the string as given (as Ansible returns it) and `argv` what ran
(`[executable, "-c", cmd]`). Ansible's `expand_argument_vars` fails the task here with Ansible's words, as Ansible's
shell action fails it: the shell expands variables itself.
"""

from __future__ import annotations

from dflash_host.host.commands import run_program
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "cmd": {
        "type": "str",
        "required": True,
        "help": "the shell command line, run as EXECUTABLE -c CMD; the playbook's own words (the engine refuses one "
                "built from what a host returned)",
    },
    "executable": {"type": "str", "default": "/bin/sh", "help": "the shell that runs cmd (with -c)"},
    "expand_argument_vars": {"type": "raw", "default": None,
                             "help": "command's option, refused here as Ansible's shell refuses it (the task fails: "
                                     "the shell expands variables itself)"},
    "_groups": ("command_options",),  # chdir, creates, removes, stdin, env, timeout_s, expect_rc...: dflash_host/shared_args.py
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("cmd", "chdir", "creates", "removes", "executable", "env")

SHOWN_CHARS = 60  # of the command line, in messages


def run(args: dict, ctx: Context) -> dict:
    cmd, executable = args["cmd"], args["executable"]
    if args["expand_argument_vars"] is not None:  # Ansible's shell action fails so, before anything runs
        raise ModuleError("Unsupported parameters for (shell) module: expand_argument_vars")
    if not cmd.strip():
        raise ModuleError("module 'shell': cmd is empty; give the command line, e.g. cmd: ls /tmp | wc -l")
    if not executable:
        raise ModuleError("module 'shell': executable is empty; give the shell, e.g. executable: /bin/bash")
    shown = cmd if len(cmd) <= SHOWN_CHARS else cmd[:SHOWN_CHARS - 3] + "..."
    return run_program("shell", [executable, "-c", cmd], cmd, f"shell command {shown!r}", "executable", args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
