"""Run a command line through the login shell, as Ansible's raw sends it down the connection (ansible.builtin.raw).

Free form: `- raw: uptime` (the engine reads the line as `cmd`), or `cmd:` with `executable` (the shell that runs
it with -c; none: the user's login shell, else /bin/sh). Result as Ansible's: rc, stdout and stderr as the program
wrote them (nothing stripped), stdout_lines, stderr_lines; always changed; a non-zero rc fails with "non-zero
return code". Skipped in check mode, as Ansible's. The line is the playbook's own words: the engine refuses one
built from what a host returned (engine/run/trust.py SHELL_CODE), as for shell.

Where it differs: Ansible's raw needs no python on the host; here the worker (python) starts the shell.
"""

from __future__ import annotations

import os
import pwd
import subprocess

from dflash_host.module import Context, ModuleError, main

ARGS = {
    "cmd": {"type": "str", "required": True,
            "help": "the command line (`- raw: LINE`), run by the shell as it is; the playbook's own words"},
    "executable": {"type": "str", "default": None,
                   "help": "the shell that runs it with -c (none: the user's login shell, else /bin/sh)"},
}
# The arguments that decide what runs (engine/run/trust.py).
CODE_ARGS = ("cmd", "executable")


def login_shell() -> str:
    """The user's login shell, as an SSH session would run the line; /bin/sh when it has none."""
    try:
        shell = pwd.getpwuid(os.geteuid()).pw_shell
    except KeyError:
        return "/bin/sh"
    return shell if shell and os.access(shell, os.X_OK) and not shell.endswith(("nologin", "false")) else "/bin/sh"


def run(args: dict, ctx: Context) -> dict:
    cmd = args["cmd"]
    if not cmd.strip():
        raise ModuleError("module 'raw': the command line is empty; write it after raw:, e.g. - raw: uptime")
    if ctx.check:
        return {"skipped": True, "changed": False, "msg": "raw does not run in check mode"}
    shell = args["executable"] or login_shell()
    try:
        proc = subprocess.run([shell, "-c", cmd], capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise ModuleError(f"module 'raw': cannot start {shell}: {exc.strerror}; give an executable the host has",
                          rc=127) from None
    stdout, stderr = (out.decode("utf-8", errors="replace") for out in (proc.stdout, proc.stderr))
    result = {"rc": proc.returncode, "stdout": stdout, "stdout_lines": stdout.splitlines(), "stderr": stderr,
              "stderr_lines": stderr.splitlines(), "changed": True}
    if proc.returncode != 0:
        result.update(failed=True, msg="non-zero return code")
    return result


if __name__ == "__main__":
    main(ARGS, run)
