"""A playbook's own Ansible module (a `library/NAME.py` beside the playbook or in a role), run as Ansible runs one:
a python process of its own, its arguments in a JSON file (`{"ANSIBLE_MODULE_ARGS": {...}}`, the file named as its
first argument), its answer one JSON object on stdout. Its `ansible.module_utils` imports find this project's
stand-in (dflash_host/ansible_compat, first on PYTHONPATH), never an ansible-core the host may have. The module's
source is the playbook author's file, sent by the control node (engine/playbook/user_modules.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

COMPAT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ansible_compat")
MODULE_FAILURE = "MODULE FAILURE\nSee stdout/stderr for the exact error"


def run_module(name: str, source: str, params: dict, check: bool, diff: bool) -> dict:
    """The module's result: its JSON answer, or Ansible's MODULE FAILURE with what it printed."""
    folder = tempfile.mkdtemp(prefix="dfp-module-")
    try:
        module = _write(folder, f"{name}.py", source)
        internal = {"_ansible_check_mode": check, "_ansible_diff": diff, "_ansible_module_name": name}
        args = _write(folder, "args.json", json.dumps({"ANSIBLE_MODULE_ARGS": {**params, **internal}}))
        proc = subprocess.run([sys.executable, module, args], capture_output=True, env=_environment(),
                              stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return module_answer(proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace"), proc.returncode)


def _write(folder: str, name: str, text: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return path


def _environment() -> dict:
    """The worker's environment (the task's `environment` included), this project's `ansible` first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (COMPAT, env.get("PYTHONPATH")) if p)
    return env


def module_answer(stdout: str, stderr: str, rc: int) -> dict:
    """The JSON object the module printed (text before it ignored, as Ansible ignores it); none, or one that is not
    an object: the module failed, and what it printed is kept for the reader."""
    start = next((i for i, line in enumerate(stdout.splitlines(keepends=True)) if line.lstrip().startswith("{")), None)
    result = None
    if start is not None:
        text = "".join(stdout.splitlines(keepends=True)[start:])
        try:
            result, _ = json.JSONDecoder().raw_decode(text.lstrip())
        except ValueError:
            result = None
    if not isinstance(result, dict):
        return {"failed": True, "changed": False, "msg": MODULE_FAILURE, "module_stdout": stdout,
                "module_stderr": stderr, "rc": rc}
    # the internal keys and the invocation are not part of what a task registers (as in Ansible)
    result = {k: v for k, v in result.items() if not k.startswith("_ansible_") and k != "invocation"}
    if rc != 0 and "failed" not in result:
        result["failed"] = True
    return result
