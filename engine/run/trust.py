"""The one rule for what a host's answer may choose: never code, a path or a delegate for the control node.

Every module declares its code arguments (`CODE_ARGS` beside `ARGS`; the engine actions' in
engine/playbook/modulespec.py ENGINE_CODE_ARGS): the program, its argv, the interpreter, the environment, the working
folder, the files, folders and addresses it touches, the `creates`/`removes` that gate it. Every task passes
through `check_task` after its arguments were rendered, whatever its module; what each value read is known from
its render (engine/template/taint.py). A task whose module runs on the control node (a host with `ansible_connection:
local`, or delegated to one) is refused when any of these was built from what another host returned, before
anything runs. The same holds for the task's `environment` and for `delegate_to` itself, which no host's answer
may choose anywhere. A shell command line (and its interpreter) built from any host's answer is refused on every
host, since a shell parses it as code wherever it runs.

The control node's own answers are its own and may steer it: a local host's facts and registered results carry no
host at all (`answer_taint`, the one place that decides), so no check anywhere counts them, save what a module on it
fetched from another machine (uri, get_url, wait_for, unarchive): that is the other machine's word.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.errors import TaskError
from engine.playbook.modulespec import code_args, is_user_module
from engine.template.taint import Taint

if TYPE_CHECKING:
    from engine.playbook.model import Task
    from engine.run.results import HostState

# Arguments a shell parses as code wherever it runs: no host's answer may build them, on any host.
SHELL_CODE = {"shell": ("cmd", "executable"), "raw": ("cmd", "executable")}
FIX = ("write the value in the playbook or the inventory, or check it first against a list the playbook writes "
       "(`when: out.stdout in allowed`) and use the list's item")


# Modules whose result is what another machine said, wherever they run.
NETWORK_ANSWERS = frozenset({"uri", "get_url", "wait_for", "unarchive"})


def runs_here(host_connection: str) -> bool:
    """A module on a host with the local connection runs on the control node itself."""
    return host_connection == "local"


def answer_taint(host: str, connection: str, module: str | None = None) -> Taint:
    """What the answer of `module` on `host` (its facts when None) carries: the host's name, unless the host is the
    control node itself and the module does not fetch from elsewhere."""
    if not runs_here(connection):
        return Taint((host,))
    if module in NETWORK_ANSWERS:
        return Taint((f"the network ({module} on {host})",))
    return Taint()


def foreign(taint: Taint | None) -> list[str]:
    """The hosts whose answers the value read (the control node's own carry none: `answer_taint`)."""
    return sorted(taint.hosts) if taint else []


def check_task(task: Task, target: HostState, arg_taints: Mapping[str, Taint], env_taint: Taint | None) -> None:
    """Refuse the task before anything runs when a host's answer would choose its code on the control node."""
    for key in SHELL_CODE.get(task.module, ()):
        taint = arg_taints.get(key)
        if taint is not None and taint.hosts:
            raise TaskError(
                f"{task.source} ('{task.name}'): the {task.module} {key} is built from what a host returned "
                f"({taint.describe()}), and host data never runs as shell code here. Pass it as an argument "
                "instead: command with argv: [PROGRAM, '{{ value }}'] (no shell parses it), or write the command "
                "in the playbook.")
    if not runs_here(target.host.connection):
        return
    where = f"{task.source} ('{task.name}')"
    # a playbook's own module: what it does with an argument is unknown, so every one counts as code
    for key in arg_taints if is_user_module(task.module) else code_args(task.module):
        hosts = foreign(arg_taints.get(key))
        if hosts:
            raise TaskError(f"{where}: the {task.module} argument '{key}' is built from what {', '.join(hosts)} "
                            f"returned, and this task runs on the control node ({target.host.name}), where a host's "
                            f"answer never chooses the program, the file or the address; {FIX}.")
    hosts = foreign(env_taint)
    if hosts:
        raise TaskError(f"{where}: the task's environment is built from what {', '.join(hosts)} returned, and this "
                        f"task runs on the control node ({target.host.name}), where a host's answer never sets the "
                        f"environment of a program (BASH_ENV, LD_PRELOAD, PATH); {FIX}.")


def check_delegate(task: Task, name: str, taint: Taint) -> None:
    """delegate_to names where the playbook's task runs: never a host's answer."""
    hosts = foreign(taint)
    if hosts:
        raise TaskError(f"{task.source} ('{task.name}'): delegate_to gave '{name}', built from what "
                        f"{', '.join(hosts)} returned, and a host's answer never chooses where a task runs; {FIX}.")
