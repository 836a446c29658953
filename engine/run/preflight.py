"""Checks that need the inventory, run before any host is touched: undefined variables, argument types.

What the YAML alone can tell (keywords, modules, argument names) is checked when the playbook loads
(engine/playbook/plays.py, tasks.py); here each selected task is checked against each host's variables.
"""

from __future__ import annotations

import sys
from collections import ChainMap
from typing import Any, Callable

from jinja2 import meta

from dflash_host.module import ModuleError, check_args  # the same argument checks the worker runs
from engine.errors import UserError
from engine.inventory.manager import Inventory
from engine.playbook.model import Play, Task, walk_tasks
from engine.playbook.modulespec import linked_vars, module_args_spec
from engine.run.actions.vars_files import include_vars_names
from engine.run.variables import MAGIC_VARS
from engine.template.lookups import check_literal_lookups
from engine.template.markers import is_template
from engine.template.templar import Templar


class Preflight:
    """Undefined variables and wrongly typed literal arguments, per play, host and selected task."""

    def __init__(self, inventory: Inventory, extra_vars: dict, templar: Templar) -> None:
        self.inventory = inventory
        self.extra_vars = extra_vars
        self.env = templar.env
        self._parsed: dict[str, set[str]] = {}  # the same strings recur for every host and task: parse once
        self._wanted_by_task: dict[int, tuple[Task, set[str]]] = {}

    def check(self, plays: list[Play], hosts_for: Callable[[Play], list[str]], selected: Callable[[Task], bool]) -> None:
        for play in plays:
            every = play.all_tasks()
            tasks = [t for t in every if selected(t)]
            known_in_play = (
                {t.register for t in every if t.register}
                | {k for t in every if t.module == "set_fact" for k in t.args}
                | {t.loop_var for t in every}
                | {t.loop_control["index_var"] for t in every if t.loop_control.get("index_var")}
                | MAGIC_VARS
                | set(self.env.globals)
            )
            included = [include_vars_names(t, play.source.parent) for t in every if t.module == "include_vars"]
            # an include_vars whose file is a template: what it defines is known at run time only
            loose = any(names is None for names in included)
            known_in_play |= {n for names in included if names for n in names}
            for name in hosts_for(play):
                base = ChainMap(self.extra_vars, play.vars, self.inventory.host(name).vars, play.defaults)
                known_on_host = known_in_play | set(base)
                for task in [] if loose else tasks:
                    known = known_on_host | set(task.vars) | set(task.role_vars) | set(task.role_defaults)
                    self._check_undefined(task, known, ChainMap(task.vars, task.role_vars, base, task.role_defaults))
            for task in tasks:  # argument types do not depend on the host
                self._check_static_types(task)
        self._check_connections({name for play in plays for name in hosts_for(play)})

    def _check_connections(self, names: set[str]) -> None:
        """SSH options every selected host will be reached with (ProxyJump, unsupported -o, ssh config): a bad
        one stops the run before any host is touched, instead of that host alone becoming unreachable."""
        from engine.connection.connect import check_ssh_settings

        for name in sorted(names):
            check_ssh_settings(self.inventory.host(name))

    def _refs(self, task: Task, value: Any) -> set[str]:
        """Variable names a value's templates read."""
        found: set[str] = set()
        if isinstance(value, str) and is_template(value):
            if value not in self._parsed:
                try:
                    ast = self.env.parse(value)
                    names = required_names(ast)
                except Exception as exc:
                    raise UserError(f"{task.source} ('{task.name}'): template syntax error in {value!r}: {exc}") from None
                check_literal_lookups(ast, f"{task.source} ('{task.name}')")  # pipe, url...: refused before any host
                self._parsed[value] = names
            found |= self._parsed[value]
        elif isinstance(value, dict):
            for k, v in value.items():
                found |= self._refs(task, k) | self._refs(task, v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                found |= self._refs(task, v)
        return found

    def _wanted(self, task: Task) -> set[str]:
        """The names a task's arguments, loop and conditions read: the same for every host, so walked once."""
        key = id(task)
        if key not in self._wanted_by_task:
            exprs = [e for e in [*task.when, task.changed_when, task.failed_when, task.until] if isinstance(e, str)]
            wanted = self._refs(task, task.args) | self._refs(task, task.loop) | self._refs(task, task.environment)
            for e in exprs:
                wanted |= self._refs(task, "{{ " + e + " }}")
            self._wanted_by_task[key] = (task, wanted)  # the task kept: its id is not reused while cached
        return self._wanted_by_task[key][1]

    @staticmethod
    def _check_required_links(task: Task, known: set[str]) -> None:
        """A required argument the task leaves out needs its linked variable defined for this host."""
        spec = module_args_spec(task.module) or {}
        for arg, var in linked_vars(task.module).items():
            if arg not in task.args and spec[arg].get("required") and var not in known:
                raise UserError(
                    f"{task.source} ('{task.name}'): module '{task.module}' needs '{arg}', which comes from the "
                    f"variable '{var}' when the task leaves it out, and '{var}' is undefined. Define {var} in the "
                    f"inventory, a role's defaults.yaml or -e, or pass {arg} in the task."
                )

    def _check_undefined(self, task: Task, known: set[str], values: ChainMap) -> None:
        self._check_required_links(task, known)
        linked = {var for arg, var in linked_vars(task.module).items() if arg not in task.args and var in values}
        wanted = self._wanted(task) | linked
        seen: set[str] = set()
        stack = list(wanted)
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name not in known:
                via = "" if name in wanted else " (used by another variable's value)"
                raise UserError(
                    f"{task.source} ('{task.name}'): variable '{name}' is undefined{via}. Define it in the "
                    f"inventory (host or group vars), the role's defaults.yaml or the play's vars, or pass "
                    f"-e {name}=VALUE."
                )
            if name in values:
                stack.extend(self._refs(task, values[name]))

    @staticmethod
    def _check_static_types(task: Task) -> None:
        spec = module_args_spec(task.module)
        if not spec:
            return
        for name, value in task.args.items():
            if name not in spec or is_template(str(value)):
                continue
            try:
                check_args({name: spec[name]}, {name: value}, task.module)
            except ModuleError as exc:
                raise UserError(f"{task.source} ('{task.name}'): {exc.msg}") from None


SPECIAL_TAGS = frozenset({"all", "tagged", "untagged", "always", "never"})


def check_tags(plays: list[Play], tags: set[str], skip_tags: set[str], selected: Callable[[Task], bool],
               warn: Callable[[str], None] | None = None) -> list[str]:
    """A --tags or --skip-tags name no task carries (a typo?), and tags that together select no task: warned
    about (as ansible-playbook's "[WARNING]: " lines, on stderr), listing the playbook's tags; the run goes on
    as Ansible's does. Returns the warnings."""
    every = [t for play in plays for t in walk_tasks(play.tasks) + play.handlers]
    known = sorted({tag for t in every for tag in t.tags})
    listing = f"the playbook's tags are: {', '.join(known)}" if known else "no task of the playbook has a tag"
    warnings = []
    for flag, names in (("--tags", tags), ("--skip-tags", skip_tags)):
        unknown = sorted(set(names) - set(known) - SPECIAL_TAGS)
        if unknown:
            warnings.append(f"{flag}: no task has the tag(s) {', '.join(map(repr, unknown))}; {listing}.")
    if tags and not any(selected(t) for play in plays for t in walk_tasks(play.tasks)):
        warnings.append(f"--tags {','.join(sorted(tags))}"
                        f"{' with --skip-tags ' + ','.join(sorted(skip_tags)) if skip_tags else ''} selects no task: "
                        f"only fact gathering would run; {listing}.")
    for line in warnings:
        (warn or _stderr_warning)(line)
    return warnings


def _stderr_warning(text: str) -> None:
    print(f"[WARNING]: {text}", file=sys.stderr, flush=True)


def required_names(ast: Any) -> set[str]:
    """The variables a parsed template reads, less those it reads only through `| default(...)` (or `| d(...)`):
    `{{ x | default(omit) }}` is fine when x is undefined, as in Ansible."""
    from jinja2 import nodes

    guarded = {id(f.node) for f in ast.find_all(nodes.Filter)
               if f.name in ("default", "d") and isinstance(f.node, nodes.Name)}
    bare = {n.name for n in ast.find_all(nodes.Name) if n.ctx == "load" and id(n) not in guarded}
    return meta.find_undeclared_variables(ast) & bare
