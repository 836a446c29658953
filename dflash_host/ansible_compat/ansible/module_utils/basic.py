"""AnsibleModule as a playbook's own module uses it, written for this project (no ansible-core code): the
parameters from the args file Ansible's protocol names (`{"ANSIBLE_MODULE_ARGS": {...}}`, sys.argv[1] or stdin),
checked against the module's argument_spec (type, default, required, choices, aliases, no_log, fallback,
elements, and the mutually_exclusive / required_* rules), check mode, exit_json / fail_json (one JSON object on
stdout), warn, run_command and get_bin_path. Messages are ansible-core's, so a playbook's assertions on them hold."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

from ._params import ParameterError, check_rules, validate
from .common.text.converters import to_bytes, to_native, to_text

__all__ = ["AnsibleModule", "env_fallback", "missing_required_lib", "to_bytes", "to_native", "to_text"]

BOOLEANS_TRUE = frozenset(("y", "yes", "on", "1", "true", "t", 1, 1.0, True))
BOOLEANS_FALSE = frozenset(("n", "no", "off", "0", "false", "f", 0, 0.0, False))
NO_LOG_MASK = "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
INTERNAL = {"_ansible_check_mode": "check_mode", "_ansible_diff": "_diff", "_ansible_no_log": "no_log",
            "_ansible_verbosity": "_verbosity", "_ansible_module_name": "_name"}


def env_fallback(*names):
    """An argument_spec `fallback: (env_fallback, [NAME, ...])`: the first of these environment variables set."""
    for name in names:
        if name in os.environ:
            return os.environ[name]
    raise LookupError(names)


def missing_required_lib(library, reason=None, url=None):
    """The message a module gives when a python library it needs is not on the host."""
    msg = f"Failed to import the required Python library ({library}) on {os.uname().nodename}'s Python {sys.executable}."
    if reason:
        msg += f" This is required {reason}."
    if url:
        msg += f" See {url} for more info."
    return msg + " Please read the module documentation and install it in the appropriate location."


def _load_params():
    """The task's arguments: the JSON file named by the first command-line argument, else stdin."""
    if len(sys.argv) > 1:
        with open(sys.argv[1], "rb") as fh:
            buffer = fh.read()
    else:
        buffer = sys.stdin.buffer.read()
    try:
        data = json.loads(buffer)
        return dict(data["ANSIBLE_MODULE_ARGS"])
    except (ValueError, KeyError, TypeError):
        print(json.dumps({"failed": True, "msg": "Error: the module needs its arguments as a JSON file "
                          '{"ANSIBLE_MODULE_ARGS": {...}} (named as its first argument, or on stdin)'}))
        sys.exit(1)


class AnsibleModule:
    """A module's view of its task: `params` checked, `check_mode`, and the ways to answer."""

    def __init__(self, argument_spec, bypass_checks=False, no_log=False, mutually_exclusive=None,
                 required_together=None, required_one_of=None, add_file_common_args=False,
                 supports_check_mode=False, required_if=None, required_by=None):
        self.argument_spec = argument_spec
        self.supports_check_mode = supports_check_mode
        self.check_mode = False
        self.no_log = no_log
        self._diff = False
        self._verbosity = 0
        self._name = os.path.splitext(os.path.basename(sys.argv[0]))[0]
        self._warnings = []
        self._deprecations = []
        self.no_log_values = set()
        self.run_command_environ_update = {}
        self.params = self._internal(_load_params())
        try:
            self.params, self.no_log_values, self.aliases = validate(argument_spec, self.params, self._name)
            check_rules(self.params, mutually_exclusive, required_together, required_one_of, required_if, required_by)
        except ParameterError as exc:
            self.fail_json(msg=str(exc))
        if self.check_mode and not supports_check_mode:
            self.exit_json(skipped=True, msg=f"remote module ({self._name}) does not support check mode")

    def _internal(self, params):
        """The `_ansible_*` settings out of the parameters, onto the module (check mode, diff, name)."""
        for key in [k for k in params if isinstance(k, str) and k.startswith("_ansible_")]:
            value = params.pop(key)
            if key in INTERNAL:
                setattr(self, INTERNAL[key], value)
        return params

    def boolean(self, value):
        """`value` as Ansible reads a boolean."""
        if isinstance(value, bool) or value is None:
            return bool(value)
        key = value.lower() if isinstance(value, str) else value
        if key in BOOLEANS_TRUE:
            return True
        if key in BOOLEANS_FALSE:
            return False
        self.fail_json(msg=f"The value '{value}' is not a valid boolean.")

    def warn(self, warning):
        self._warnings.append(str(warning))

    def deprecate(self, msg, version=None, date=None, collection_name=None, **kwargs):
        self._deprecations.append({"msg": msg, "version": version, "date": date, "collection_name": collection_name})

    def log(self, msg, log_args=None):
        """Ansible logs to syslog; nothing is logged here."""

    def debug(self, msg):
        """Shown only at Ansible's debug level; nothing here."""

    def exit_json(self, **kwargs):
        """Answer the task (not failed) and end the module."""
        self._answer(kwargs)
        sys.exit(0)

    def fail_json(self, msg, **kwargs):
        """Fail the task with `msg` and end the module."""
        kwargs.pop("exception", None)
        kwargs.update(failed=True, msg=str(msg))
        self._answer(kwargs)
        sys.exit(1)

    def _answer(self, result):
        """The result as one JSON line, with the invocation and warnings, every no_log value masked."""
        result.setdefault("invocation", {"module_args": self.params})
        if self._warnings:
            result["warnings"] = list(self._warnings)
        if self._deprecations:
            result["deprecations"] = list(self._deprecations)
        print("\n" + json.dumps(_masked(result, self.no_log_values), default=str))

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        """The program `arg` on PATH (or in opt_dirs, or sbin folders), else None (required: fail)."""
        folders = list(opt_dirs or []) + os.environ.get("PATH", "").split(os.pathsep) + ["/sbin", "/usr/sbin", "/usr/local/sbin"]
        found = shutil.which(arg, path=os.pathsep.join(f for f in folders if f))
        if found is None and required:
            self.fail_json(msg=f"Failed to find required executable \"{arg}\" in paths: {os.pathsep.join(folders)}")
        return found

    def run_command(self, args, check_rc=False, close_fds=True, executable=None, data=None, binary_data=False,
                    path_prefix=None, cwd=None, use_unsafe_shell=False, prompt_regex=None, environ_update=None,
                    umask=None, encoding="utf-8", errors="surrogate_or_strict", expand_user_and_vars=True,
                    pass_fds=None, before_communicate_callback=None, ignore_invalid_cwd=True, handle_exceptions=True):
        """(rc, stdout, stderr) of a program: an argv list, or a string split as a shell would (run by a shell
        only with use_unsafe_shell); check_rc fails the module on a non-zero exit."""
        argv = _argv(args, use_unsafe_shell, expand_user_and_vars)
        env = dict(os.environ, **self.run_command_environ_update, **(environ_update or {}))
        if path_prefix:
            env["PATH"] = path_prefix + os.pathsep + env.get("PATH", "")
        stdin = None if data is None else to_bytes(data if binary_data else str(data) + "\n")
        if cwd and not os.path.isdir(os.path.expanduser(cwd)):
            cwd = None if ignore_invalid_cwd else cwd
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, cwd=cwd and os.path.expanduser(cwd),
                                  env=env, shell=isinstance(argv, str), executable=executable if use_unsafe_shell else None)  # noqa: S602 - use_unsafe_shell: the module asked for a shell
        except OSError as exc:
            if not handle_exceptions:
                raise
            self.fail_json(rc=exc.errno, msg=to_native(exc), cmd=args)
        out, err = (proc.stdout, proc.stderr) if encoding is None else (to_text(proc.stdout, encoding, errors),
                                                                      to_text(proc.stderr, encoding, errors))
        if check_rc and proc.returncode != 0:
            self.fail_json(cmd=args, rc=proc.returncode, stdout=out, stderr=err, msg=(to_text(err) or "").rstrip())
        return proc.returncode, out, err


def _argv(args, use_unsafe_shell, expand):
    """The command as run_command runs it: a shell line with use_unsafe_shell, else an argv list."""
    if use_unsafe_shell:
        return args if isinstance(args, str) else " ".join(shlex.quote(to_text(a)) for a in args)
    argv = shlex.split(to_text(args)) if isinstance(args, (str, bytes)) else [to_text(a) for a in args]
    if expand:
        argv = [os.path.expanduser(os.path.expandvars(a)) for a in argv]
    return argv


def _masked(value, secrets):
    """`value` with each no_log parameter's value replaced (booleans and None kept, as Ansible keeps them)."""
    if not secrets or value is None or isinstance(value, bool):
        return value
    if isinstance(value, dict):
        return {k: _masked(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v, secrets) for v in value]
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            if value == secret:
                return NO_LOG_MASK
            value = value.replace(secret, "********")
        return value
    return NO_LOG_MASK if str(value) in secrets else value
