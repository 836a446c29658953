"""Install, upgrade or remove Python packages with pip, in a virtualenv if asked (ansible.builtin.pip).

As Ansible's: `name` (a list; `pkg>=1,<2` or its pieces as list items are one requirement; `version` for a single
name) or `requirements` (a file, relative to chdir); state present (pip install), latest (-U), forcereinstall (-U
--force-reinstall), absent (pip uninstall -y); extra_args split as a shell would; `virtualenv` created first when
it has no bin/activate, with virtualenv_command (`virtualenv` by default, -p virtualenv_python or this python;
`python3 -m venv` or pyvenv take no virtualenv_python) and virtualenv_site_packages; pip is the venv's pip3 or
pip, else `executable`, else this python's `-m pip`. Changed when pip says "Successfully installed" /
"Successfully uninstalled" (requirements and VCS names: when `pip list --format=freeze` differs after), or a venv
was made. Check mode reads `pip list --format=freeze` and says whether a named package is missing (present) or
there (absent); latest, requirements and extra_args answer changed, as Ansible's. Result: cmd, name, version,
state, requirements, virtualenv, stdout, stderr; a failure "stdout: ...\\n:stderr: ...". umask applies to the
install; break_system_packages sets PIP_BREAK_SYSTEM_PACKAGES. The requirement matching is
dflash_host/host/pip_requirements.py. tests/library/test_pip_against_ansible.py runs both on a local wheel.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

from dflash_host.host import pip_requirements
from dflash_host.module import Context, ModuleError, main

ARGS = {
    "name": {"type": "list", "default": None, "help": "packages (with version specifiers), URLs or paths"},
    "version": {"type": "str", "default": None, "help": "the version of the one package in name"},
    "requirements": {"type": "str", "default": None, "help": "a requirements file (relative: to chdir)"},
    "state": {"type": "str", "default": "present", "choices": ["present", "absent", "latest", "forcereinstall"],
              "help": "present, absent, latest (pip install -U) or forcereinstall"},
    "virtualenv": {"type": "path", "default": None, "help": "a virtualenv to install into (made when missing)"},
    "virtualenv_site_packages": {"type": "bool", "default": False,
                                 "help": "a new virtualenv sees the system's site-packages"},
    "virtualenv_command": {"type": "path", "default": "virtualenv",
                           "help": "what makes the virtualenv: virtualenv, or e.g. `python3 -m venv`"},
    "virtualenv_python": {"type": "str", "default": None, "help": "the python a new virtualenv gets (virtualenv only)"},
    "extra_args": {"type": "str", "default": None, "help": "more pip arguments (split as a shell would)"},
    "editable": {"type": "bool", "default": False, "help": "pass -e (an editable install)"},
    "chdir": {"type": "path", "default": None, "help": "the folder pip runs in (none: the temp folder)"},
    "executable": {"type": "path", "default": None, "help": "the pip to run (not with virtualenv)"},
    "umask": {"type": "str", "default": None, "help": "an octal umask for the install, e.g. 0022"},
    "break_system_packages": {"type": "bool", "default": False,
                              "help": "let pip change an externally managed python (PEP 668)"},
}
# The arguments that decide what runs or which file, folder or address is touched (engine/run/trust.py).
CODE_ARGS = ("name", "requirements", "virtualenv", "virtualenv_command", "virtualenv_python", "extra_args", "chdir",
             "executable")
STATE_ARGS = {"present": ["install"], "absent": ["uninstall", "-y"], "latest": ["install", "-U"],
              "forcereinstall": ["install", "-U", "--force-reinstall"]}
VCS = re.compile(r"(svn|git|hg|bzr)\+")
RUN_TIMEOUT_S = 4 * 3600.0  # a pip run that takes longer is reported, never waited on forever


class Done(Exception):
    """The task's answer, reached early (Ansible's exit_json mid-way)."""

    def __init__(self, result: dict) -> None:
        super().__init__("done")
        self.result = result


def run_cmd(cmd: list, cwd: str, path_prefix: str | None = None, env_update: dict | None = None) -> tuple:
    env = dict(os.environ, **(env_update or {}))
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env.get('PATH', '')}"
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=RUN_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise ModuleError(f"cannot run {cmd[0]}: not found; install it or give its full path") from None
    except subprocess.TimeoutExpired:
        raise ModuleError(f"'{shlex.join(cmd)}' ran past {RUN_TIMEOUT_S:g} s and was stopped") from None
    except OSError as exc:
        raise ModuleError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    return proc.returncode, proc.stdout, proc.stderr


def fail(cmd: list, out: str, err: str) -> ModuleError:
    msg = (f"stdout: {out}" if out else "") + (f"\n:stderr: {err}" if err else "")
    return ModuleError(msg or f"'{shlex.join(cmd)}' failed", cmd=cmd)


def is_venv_command(command: str) -> bool:
    argv = shlex.split(command)
    if argv and argv[0] == "pyvenv":
        return True
    return any(argv[i] == "-m" and argv[i + 1] == "venv" for i in range(1, len(argv) - 1)) or "-mvenv" in argv


def make_virtualenv(args: dict, env: str, chdir: str, ctx: Context) -> tuple[str, str]:
    if ctx.check:
        raise Done({"changed": True})
    cmd = shlex.split(args["virtualenv_command"])
    if os.path.basename(cmd[0]) == cmd[0]:
        found = shutil.which(cmd[0])
        if found is None:
            raise ModuleError(f"Failed to find required executable \"{cmd[0]}\" in paths: {os.environ.get('PATH', '')}")
        cmd[0] = found
    if args["virtualenv_site_packages"]:
        cmd.append("--system-site-packages")
    if not is_venv_command(args["virtualenv_command"]):
        cmd.append(f"-p{args['virtualenv_python'] or sys.executable}")
    elif args["virtualenv_python"]:
        raise ModuleError("virtualenv_python should not be used when using the venv module or pyvenv as "
                          "virtualenv_command")
    cmd.append(env)
    rc, out, err = run_cmd(cmd, chdir)
    if rc != 0:
        raise fail(cmd, out, err)
    return out, err


def find_pip(env: str | None, executable: str | None) -> list[str]:
    if executable is not None and os.path.isabs(executable):
        return [executable]
    if executable is None and env is None:
        return [sys.executable, "-m", "pip"]
    if env is None:
        found = shutil.which(executable or "pip3")
        if found is None:
            raise ModuleError(f"Unable to find any of {executable or 'pip3'} to use.  pip needs to be installed.")
        return [found]
    names = (executable or "pip3", "pip")
    for name in names:
        candidate = os.path.join(env, "bin", name)
        if os.path.exists(candidate) and os.access(candidate, os.X_OK):
            return [candidate]
    raise ModuleError(f"Unable to find pip in the virtualenv, {env}, under any of these names: {', '.join(names)}. "
                      "Make sure pip is present in the virtualenv.")


def packages_list(pip: list, chdir: str) -> tuple[str, str, str]:
    """(the command as one line, its output, its stderr): pip list --format=freeze, or pip freeze for an old pip."""
    locale = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "LC_MESSAGES": "C.UTF-8"}
    command = pip + ["list", "--format=freeze"]
    rc, out, err = run_cmd(command, chdir, env_update=locale)
    if rc != 0:
        command = pip + ["freeze"]
        rc, out, err = run_cmd(command, chdir)
        if rc != 0:
            raise fail(command, out, err)
    return " ".join(command), out, err


def requirements_of(args: dict) -> list[pip_requirements.Requirement]:
    packages = [pip_requirements.Requirement(p) for p in pip_requirements.join_names(args["name"])]
    if args["version"] is not None:
        if len(packages) > 1:
            raise ModuleError("'version' argument is ambiguous when installing multiple package distributions. Please "
                              "specify version restrictions next to each package in 'name' argument.")
        if packages[0].specs:
            raise ModuleError("The 'version' argument conflicts with any version specifier provided along with a "
                              "package name. Please keep the version specifier, but remove the 'version' argument.")
        packages[0] = pip_requirements.Requirement(packages[0].text, args["version"])
    return packages


def check_only(args: dict, pip: list, chdir: str, packages: list, out: str, err: str, extra: str | None) -> dict:
    state = args["state"]
    if extra or args["requirements"] or state == "latest" or not args["name"]:
        return {"changed": True}
    cmd, listed, list_err = packages_list(pip, chdir)
    have = pip_requirements.installed([line for line in listed.split("\n") if line and not line.startswith("You ")])
    changed = any((state == "present" and not pip_requirements.present(p, have)) or (state == "absent" and pip_requirements.present(p, have))
                  for p in packages)
    return {"changed": changed, "cmd": cmd, "stdout": out + listed, "stderr": err + list_err}


def check_args(args: dict) -> None:
    if not args["name"] and not args["requirements"]:
        raise ModuleError("one of the following is required: name, requirements")
    if args["name"] and args["requirements"]:
        raise ModuleError("parameters are mutually exclusive: name|requirements")
    if args["executable"] and args["virtualenv"]:
        raise ModuleError("parameters are mutually exclusive: executable|virtualenv")
    if args["state"] == "latest" and args["version"] is not None:
        raise ModuleError("version is incompatible with state=latest")


def install(args: dict, ctx: Context) -> dict:
    state, env = args["state"], args["virtualenv"]
    if env and args["chdir"]:
        env = os.path.join(args["chdir"], env)
    chdir = args["chdir"] or tempfile.gettempdir()
    out = err = ""
    made = False
    if env and not os.path.exists(os.path.join(env, "bin", "activate")):
        out, err = make_virtualenv(args, env, chdir, ctx)
        made = True
    pip = find_pip(env, args["executable"])
    packages = requirements_of(args) if args["name"] else []
    extra = args["extra_args"]
    if args["editable"]:
        words = extra.split(" ") if extra else []
        extra = " ".join(words + ([] if "-e" in words else ["-e"]))
    cmd = pip + STATE_ARGS[state] + (shlex.split(extra) if extra else [])
    cmd += [str(p) for p in packages] if packages else ["-r", args["requirements"]]
    if args["break_system_packages"]:
        os.environ["PIP_BREAK_SYSTEM_PACKAGES"] = "1"
    if ctx.check:
        return check_only(args, pip, chdir, packages, out, err, extra)
    watch = bool(args["requirements"]) or any(VCS.match(str(p)) for p in packages)
    before = packages_list(pip, chdir)[1] if watch else None
    rc, run_out, run_err = run_cmd(cmd, chdir, os.path.join(env, "bin") if env else None)
    out, err = out + run_out, err + run_err
    if rc != 0 and not (rc == 1 and state == "absent" and "not installed" in run_out + run_err):
        raise fail(cmd, out, err)
    if state == "absent":
        changed = "Successfully uninstalled" in run_out
    elif before is None:
        changed = "Successfully installed" in run_out
    else:
        changed = before != packages_list(pip, chdir)[1]
    return {"changed": changed or made, "cmd": cmd, "name": args["name"], "version": args["version"], "state": state,
            "requirements": args["requirements"], "virtualenv": env, "stdout": out, "stderr": err}


def run(args: dict, ctx: Context) -> dict:
    check_args(args)
    umask = None
    if args["umask"] is not None:
        try:
            umask = int(args["umask"], 8)
        except ValueError:
            raise ModuleError("umask must be an octal integer", details=f"invalid literal: {args['umask']!r}") from None
    old = os.umask(umask) if umask is not None else None
    try:
        return install(args, ctx)
    except Done as done:
        return done.result
    finally:
        if old is not None:
            os.umask(old)


if __name__ == "__main__":
    main(ARGS, run)
