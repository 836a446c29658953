"""Module arguments written as templates (`args: "{{ some_dict }}"`, `debug: "{{ debug_args }}"`, `assert: "{{ item
}}"`): rendered per host (and loop item) to a mapping, the task's written arguments over it, then checked against
the module's argument table as the load checks written ones (engine/playbook/tasks.py check_module_args). A
wrong one fails that host's task, as Ansible's does, never the whole run.

Every argument a template gave carries what the template read (engine/template/taint.py), so the trust rule
(engine/run/trust.py) judges it as a written one: a shell line or a control-node program built from what a host
returned stays refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import TaskError, UserError
from engine.playbook.tasks import check_module_args, needs_run_check
from engine.template.taint import Taint

if TYPE_CHECKING:
    from engine.playbook.model import Task
    from engine.template.templar import Templar

class ArgsRejected(TaskError):
    """A templated task's arguments that do not fit its module: that host's task (or loop item) fails."""


TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", type(None): "NoneType"}


def templated_layers(templar: Templar, task: Task, view) -> list[tuple[dict, Taint]]:
    """Each of the task's argument templates rendered for this host, lowest first, with what it read."""
    layers = []
    for template in task.args_templates:
        value, taint = templar.render_tracked(template, view)
        if not isinstance(value, dict):
            kind = TYPE_NAMES.get(type(value), type(value).__name__)
            raise ArgsRejected(f"{task.source} ('{task.name}'): Task args must resolve to a 'dict' not '{kind}': "
                            f"{template!r} gave {kind}. Make the template give a mapping of the module's arguments "
                            "(a variable holding {msg: hi}, or an item of a loop over such mappings).")
        layers.append((value, taint))
    return layers


def check_rendered(task: Task, args: dict) -> None:
    """A templated task's arguments, once rendered, against the module's table, and a task that leaves out a
    required one or gives an internal option its module lacks (a failure of the host, as Ansible's; set_fact
    checks its names itself, with Ansible's words)."""
    if task.module == "set_fact" or not (task.args_templates or needs_run_check(task.module, task.args)):
        return
    try:
        check_module_args(task.module, args, f"{task.source} ('{task.name}')")
    except UserError as exc:
        raise ArgsRejected(str(exc)) from None


def as_written(task: Task, args: dict, taints: dict, key: str) -> Any:
    """An argument that the engine evaluates as an expression (assert's `that`, debug's `var`): as the playbook
    wrote it, or as a template of the playbook gave it; never built from what a host returned (an expression is
    code, and a host's answer is data)."""
    if key in task.args:
        return task.args[key]
    taint = taints.get(key)
    if taint is not None and taint.hosts:
        raise TaskError(f"{task.source} ('{task.name}'): the {task.module} argument '{key}' is an expression built "
                        f"from what a host returned ({taint.describe()}), and a host's answer is never evaluated as "
                        "an expression here; write the expression in the playbook (its variables may hold the "
                        "host's values).")
    return args.get(key)
