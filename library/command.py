"""Run a program unless its result already exists: Ansible's `cmd` (a command line split into arguments, never
run by a shell) or an `argv` list.

ansible.builtin.command's options and result, with a few of our own. No role or playbook uses it: it is here
for the benchmark's workload (bench/workload/ours.yaml, the same tasks as Ansible's) and for user playbooks, for
the steps no other module covers: a one-off build, a probe whose output a later task reads.

What runs: exactly one of `cmd` (a string, split with shlex.split as ansible.builtin.command splits it: quotes
and backslashes group words, but no pipes, redirections, globs or `;`; Ansible's one-line form
`- command: ls -l /tmp creates=/x` gives it too) and `argv` (a list, one item per argument). Each argument's
`$VAR`, `${VAR}` and leading `~` of a `cmd` are expanded from the environment (the task's `environment` and
`env`), one not set left as written, as Ansible does (quoting does not stop it, as in Ansible). An `argv` list
is taken literally unless `expand_argument_vars: true` (a difference from Ansible, on purpose: an item that must
reach the program as written, a value a host returned or a `sh -c` script whose `$X` that shell should expand,
is never rewritten by the environment); `expand_argument_vars: false` takes a `cmd` literally too. `executable` is accepted and not used, with
Ansible's warning: the shell module runs a shell.

`creates`/`removes` (a path or a glob pattern, relative ones taken from `chdir`) make it idempotent: when they
say it need not run, it is not run, with Ansible's result: changed false, rc 0, msg "Did not run command since
'/x' exists" (or "... does not exist"; "Would not ..." in check mode) and stdout "skipped, since /x exists". The
task's `changed_when` can refine what "changed" means. In check mode it does not run unless the task marks it
`check_safe` (read-only): rc 0, msg "Command would have run if not in check mode (...)", changed true when
creates or removes is given, else skipped (as Ansible).

Result: Ansible's `cmd` (the argv list before expansion, as Ansible returns it), `rc`, `stdout`, `stderr` (their
line ends at the end stripped, `strip_empty_ends`), `stdout_lines`, `stderr_lines`, `start`, `end`
('%Y-%m-%d %H:%M:%S.%f'), `delta` ('H:MM:SS.ffffff'; start, end and delta null when it did not run); and ours:
`argv` (what ran, expanded), `ran` (false when skipped or not run in check mode), `duration_s`. `stdin` gets a
newline added (`stdin_add_newline`, as Ansible). A failure (rc outside expect_rc, a timeout) is changed true, as
Ansible's is (the program ran): run() returns it with failed true rather than raising ModuleError (which would
make it changed false); a refusal before anything ran (bad arguments, chdir, a program not found) is a
ModuleError.

Where we differ from ansible.builtin.command, on purpose:
- msg: on success ours says what ran, its rc and time ("ran command ls: rc 0 in 0.004 s"; Ansible's is "") and on
  failure ours starts with Ansible's "non-zero return code" and goes on with the rc expected and the last lines
  of stderr (or stdout), because the console prints msg and a failure should say why without -v; Ansible's is
  those three words alone. The skip and check-mode messages are Ansible's (check mode's with a note after them).
- a return code outside `expect_rc` (default [0]) fails; `timeout_s` stops the program's whole process group
  and fails (rc null); stdout and stderr are each cut to 64 KiB (head and tail, with a note and
  `stdout_truncated_chars`); `env` adds variables; the program reads /dev/null when no stdin is given (Ansible's
  inherits the module's); `check_safe` runs a read-only command in check mode (Ansible's never runs there).
- a string `argv` is refused (Ansible's would make it one argument, or split it at commas); a chdir that is not
  a folder, a program not found, `cmd` that cannot be split: a message that says the fix (Ansible's first words
  kept where it has some: "Unable to change directory before execution"); a program not found keeps `cmd` the
  list (Ansible's is then the string) and rc the errno (2, as Ansible's).
"""

from __future__ import annotations

import os

from dflash_host.host.commands import check_argv, check_env, expand_argument, run_program, split_cmd
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "cmd": {
        "type": "str",
        "default": None,
        "help": "the command line, split into arguments like a shell line (quotes, backslashes) but never run by "
                "one: no pipes, redirections or globs; e.g. cmd: ls -l /tmp (exactly one of cmd and argv)",
    },
    "argv": {
        "type": "raw",
        "default": None,
        "help": 'program and its arguments as a list, e.g. ["uv", "venv", "/opt/env"]; a string is refused (that '
                "is cmd)",
    },
    "expand_argument_vars": {
        "type": "bool",
        "default": None,
        "help": "expand $VAR, ${VAR} and a leading ~ in each argument (one not set stays as written), as Ansible "
                "does; default: yes for cmd, no for an argv list (its items reach the program as written)",
    },
    "executable": {
        "type": "str",
        "default": None,
        "help": "not used, as in Ansible since 2.4 (a warning says so): the shell module runs a shell",
    },
    "_groups": ("command_options",),  # chdir, creates, removes, stdin, env, timeout_s, expect_rc...: dflash_host/shared_args.py
}
# The arguments that decide what runs or which file, folder or address is touched: never built from what a
# host returned when the task runs on the control node (engine/run/trust.py).
CODE_ARGS = ("argv", "cmd", "chdir", "creates", "removes", "executable", "env")


def command_words(cmd: str | None, argv: object) -> list[str]:
    """What runs, before expansion: cmd split as Ansible splits it, or argv; exactly one of them."""
    if (cmd is None) == (argv is None):  # Ansible's words first (its cmd is _raw_params)
        got = ("parameters are mutually exclusive: _raw_params|cmd|argv" if cmd is not None
               else "one of the following is required: _raw_params, cmd, argv")
        raise ModuleError(
            f"{got}. module 'command': give exactly one of 'cmd' and 'argv': cmd is a command line split into "
            'arguments like a shell line but never run by one (cmd: ls -l /tmp), argv a list with one item per '
            'argument (argv: ["ls", "-l", "/tmp"]); for pipes or redirections use the shell module'
        )
    return split_cmd(cmd) if cmd is not None else check_argv(argv)


def run(args: dict, ctx: Context) -> dict:
    words = command_words(args["cmd"], args["argv"])
    if args["executable"] is not None:  # Ansible's words
        ctx.warn(f"As of Ansible 2.4, the parameter 'executable' is no longer supported with the 'command' module. "
                 f"Not using '{args['executable']}'.")
    argv = words
    expand = args["expand_argument_vars"]
    if expand if expand is not None else args["cmd"] is not None:
        environ = {**os.environ, **check_env(args["env"])}
        argv = [expand_argument(word, environ) for word in words]
    program_arg = "the first word of cmd" if args["cmd"] is not None else "argv[0]"
    return run_program("command", argv, words, f"command {argv[0]}", program_arg, args, ctx)


if __name__ == "__main__":
    main(ARGS, run)
