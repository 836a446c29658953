"""Checks that need the inventory, run before any host is touched: undefined variables, argument types.

What the YAML alone can tell (keywords, modules, argument names) is checked when the playbook loads
(engine/playbook/plays.py, tasks.py); here each selected task is checked against each host's variables.

An undefined variable stops the run here only where that cannot be wrong: the task certainly runs on the host
(no `when`, not a handler, not in a rescue or a block with one, no ignore_errors, not in a conditional include),
its template certainly reads the name (not only behind `and`, `if`, a filter's argument, `is defined`,
`default(...)`), and nothing could set it at run time (register, set_fact, include_vars, a loop, a role's vars
or defaults, a fact). Otherwise Ansible would run the playbook, so an unknown name is a warning and the task
fails at run time, as Ansible's does, if the name is still undefined then.
"""

from __future__ import annotations

import sys
from collections import ChainMap
from dataclasses import dataclass
from typing import Any, Callable

from jinja2 import meta, nodes

from dflash_host.module import ModuleError, check_args  # the same argument checks the worker runs
from engine.errors import UserError
from engine.inventory.manager import Inventory
from engine.playbook.model import Block, Include, Play, Task, walk_tasks
from engine.playbook.modulespec import linked_vars, module_args_spec
from engine.run import fact_store
from engine.run.actions.vars_files import include_vars_names
from engine.run.conditionals import as_template
from engine.run.variables import MAGIC_VARS
from engine.template.markers import is_template
from engine.template.templar import Templar


class TemplateSyntaxError(UserError):
    """A task's template that does not parse (an error before the run only when the task certainly runs)."""


@dataclass(frozen=True)
class Reads:
    """The variables a template reads: `every` one, those whose being undefined `certain`ly fails its render, and
    those it tests or defaults (`guarded`: `x is defined`, `x | default(...)`, `'x' in vars`)."""

    every: frozenset[str] = frozenset()
    certain: frozenset[str] = frozenset()
    guarded: frozenset[str] = frozenset()

    def __or__(self, other: Reads) -> Reads:
        return Reads(self.every | other.every, self.certain | other.certain, self.guarded | other.guarded)

    def uncertain(self) -> Reads:
        """The same names, none of them read for sure (the template may not render at all)."""
        return Reads(self.every, frozenset(), self.guarded)


@dataclass
class RunNames:
    """What the run itself may define, whatever the play, task or host: a name set by some task (register,
    set_fact, include_vars, a loop variable), a role's vars or defaults; `open` when a task sets names known only
    at run time (an include_vars of a templated file, a templated set_fact key)."""

    names: set[str]
    open: bool

    @classmethod
    def of(cls, plays: list[Play]) -> RunNames:
        names: set[str] = set()
        is_open = False
        for play in plays:
            for t in play.all_tasks():
                names |= {t.loop_var, *([t.register] if t.register else [])}
                names |= set(t.role_vars) | set(t.role_defaults)
                if t.loop_control.get("index_var"):
                    names.add(str(t.loop_control["index_var"]))
                if t.module == "set_fact":
                    keys = {str(k) for k in t.args}
                    is_open = is_open or any(is_template(k) for k in keys) or bool(t.args_templates)
                    names |= keys
                elif t.module in ("include_tasks", "include_role") and (
                        t.loop is not None or any(is_template(str(v)) for v in t.args.values())):
                    is_open = True  # an include read when reached: what its tasks set is known only then
                elif t.module == "include_vars":
                    found = include_vars_names(t, play.source.parent)
                    is_open = is_open or found is None
                    names |= found or set()
            is_open = is_open or public_role_include(play.tasks + play.handlers)
        return cls(names, is_open)


def public_role_include(items: list) -> bool:
    """An include_role with `public` read when reached: its role's defaults and vars join the play only then."""
    for item in items:
        if isinstance(item, Block) and public_role_include(item.block + item.rescue + item.always):
            return True
        if isinstance(item, Include) and (
                (item.dynamic is not None and item.dynamic.spec.get("public") not in (None, False))
                or public_role_include(item.tasks)):
            return True
    return False


class Preflight:
    """Undefined variables and wrongly typed literal arguments, per play, host and selected task."""

    def __init__(self, inventory: Inventory, extra_vars: dict, templar: Templar,
                 warn: Callable[[str], None] | None = None) -> None:
        self.inventory = inventory
        self.extra_vars = extra_vars
        self.env = templar.env
        self.warn = warn or _stderr_warning
        self.warnings: dict[tuple[int, str], tuple[Task, str, str, list[str]]] = {}  # (task, name) -> ..., hosts
        self._parsed: dict[str, Reads] = {}  # the same strings recur for every host and task: parse once
        self._reads_by_task: dict[int, tuple[Task, Reads]] = {}
        self.syntax_warnings: dict[int, str] = {}  # a template that does not parse, in a task that may not run

    def check(self, plays: list[Play], hosts_for: Callable[[Play], list[str]], selected: Callable[[Task], bool]) -> None:
        run = RunNames.of(plays)
        always = run.names | MAGIC_VARS | set(self.env.globals)
        for play in plays:
            tasks = [t for t in play.all_tasks() if selected(t)]
            certain = set() if run.open else certain_tasks(play.tasks)
            for name in hosts_for(play):
                base = ChainMap(self.extra_vars, play.vars, self.inventory.host(name).vars, play.defaults)
                known_on_host = always | set(base) | set(fact_store.load(name))  # facts a former run cached
                for task in tasks:
                    known = known_on_host | set(task.vars) | set(task.role_vars) | set(task.role_defaults)
                    values = ChainMap(task.vars, task.role_vars, base, task.role_defaults)
                    self._check_undefined(task, name, known, values, id(task) in certain, run.open)
            for task in tasks:  # argument types do not depend on the host
                self._check_static_types(task)
        self._report_warnings()
        self._check_connections({name for play in plays for name in hosts_for(play)})

    def _check_connections(self, names: set[str]) -> None:
        """SSH options every selected host will be reached with (ProxyJump, unsupported -o, ssh config): a bad
        one stops the run before any host is touched, instead of that host alone becoming unreachable."""
        from engine.connection.connect import check_ssh_settings

        for name in sorted(names):
            check_ssh_settings(self.inventory.host(name))

    def _refs(self, task: Task, value: Any) -> Reads:
        """What a value's templates read."""
        found = Reads()
        if isinstance(value, str) and is_template(value):
            if value not in self._parsed:
                try:
                    ast = self.env.parse(value)
                    reads = template_reads(ast)
                except Exception as exc:
                    raise TemplateSyntaxError(f"{task.source} ('{task.name}'): template syntax error in {value!r}: "
                                              f"{exc}") from None
                self._parsed[value] = reads
            found = self._parsed[value]
        elif isinstance(value, dict):
            for k, v in value.items():
                found = found | self._refs(task, k) | self._refs(task, v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                found = found | self._refs(task, v)
        return found

    def _reads(self, task: Task) -> Reads:
        """What a task's arguments, loop and conditions read, the same for every host, so walked once. With a
        `when`, only its first condition is read for sure: Ansible stops at the first false one, and then renders
        neither the loop nor the arguments."""
        key = id(task)
        if key not in self._reads_by_task:
            body = self._args_refs(task) | self._refs(task, task.loop) | self._refs(task, task.environment)
            for expr in (task.changed_when, task.failed_when, task.until):
                if isinstance(expr, str):
                    body = body | self._refs(task, as_template(expr))
            conditions = [self._refs(task, as_template(e)) if isinstance(e, str) else Reads() for e in task.when]
            reads = conditions[0] if conditions else body
            for later in [*conditions[1:], body] if conditions else []:
                reads = reads | later.uncertain()
            self._reads_by_task[key] = (task, reads)  # the task kept: its id is not reused while cached
        return self._reads_by_task[key][1]

    def _args_refs(self, task: Task) -> Reads:
        """What a task's arguments read; assert's `that` holds conditionals (bare expressions, as `when`), so a
        `{{ }}` inside one of their strings is that string's text, not a template the task renders."""
        that = task.args.get("that") if task.module == "assert" else None
        if that is None:
            return self._refs(task, task.args)
        rest = self._refs(task, {k: v for k, v in task.args.items() if k != "that"})
        for expr in that if isinstance(that, list) else [that]:
            rest = rest | (self._refs(task, as_template(expr)) if isinstance(expr, str) else self._refs(task, expr))
        return rest

    @staticmethod
    def _check_required_links(task: Task, known: set[str], sure: bool) -> set[str]:
        """A required argument the task leaves out needs its linked variable defined for this host: an error when
        the task certainly runs; else the variable is returned, to be warned about."""
        spec = module_args_spec(task.module) or {}
        missing = {arg: var for arg, var in linked_vars(task.module).items()
                   if arg not in task.args and spec[arg].get("required") and var not in known}
        for arg, var in missing.items() if sure else ():
            raise UserError(
                f"{task.source} ('{task.name}'): module '{task.module}' needs '{arg}', which comes from the "
                f"variable '{var}' when the task leaves it out, and '{var}' is undefined. Define {var} in the "
                f"inventory, a role's defaults.yaml or -e, or pass {arg} in the task."
            )
        return set(missing.values())

    def _check_undefined(self, task: Task, host: str, known: set[str], values: ChainMap, certain: bool,
                         run_open: bool) -> None:
        """Each name the task reads, and those the values of the variables it reads read in turn: an error when it
        is certainly undefined (see the module's docstring), a warning when it only may be."""
        sure_task = certain and not task.when
        unknown = self._check_required_links(task, known, sure_task)
        try:
            reads = self._reads(task)
        except TemplateSyntaxError as exc:
            if certain:
                raise
            self.syntax_warnings.setdefault(id(task), str(exc))  # it may never render: Ansible runs the play
            return
        linked = {var for arg, var in linked_vars(task.module).items() if arg not in task.args and var in values}
        stack = [(n, certain and n in reads.certain, True) for n in reads.every - reads.guarded]
        stack += [(n, sure_task, True) for n in linked | unknown]
        done: dict[str, bool] = {}  # name -> read for sure
        while stack:
            name, sure, direct = stack.pop()
            if name in done and (done[name] or not sure):
                continue
            done[name] = sure
            if name in known:
                if name in values:
                    sub = self._refs(task, values[name])
                    stack.extend((n, sure and n in sub.certain, False) for n in sub.every - sub.guarded)
                continue
            via = "" if direct else " (used by another variable's value)"
            if sure and not name.startswith("ansible_"):  # an ansible_* name may be a fact some module sets
                raise UserError(
                    f"{task.source} ('{task.name}'): variable '{name}' is undefined{via}. Define it in the "
                    f"inventory (host or group vars), the role's defaults.yaml or the play's vars, or pass "
                    f"-e {name}=VALUE."
                )
            if not run_open:  # a templated include_vars or set_fact key may set anything: nothing to say
                self.warnings.setdefault((id(task), name), (task, name, via, []))[3].append(host)

    def _report_warnings(self) -> None:
        """One warning per task and name, naming the hosts, as ansible-playbook's `[WARNING]:` lines."""
        for text in self.syntax_warnings.values():
            self.warn(f"{text}. The run goes on (the task may not run: a `when`, a handler, a rescue, "
                      f"ignore_errors); if it does, it fails there, as in Ansible.")
        for task, name, via, hosts in self.warnings.values():
            shown = ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
            self.warn(
                f"{task.source} ('{task.name}'): variable '{name}'{via} is not defined for {shown} by -e, the "
                f"inventory, the play, its roles or the task, and no task sets it. The run goes on (the task may "
                f"not read it: a `when`, a handler, a rescue, ignore_errors); if it does, the task fails there, "
                f"as in Ansible (\"'{name}' is undefined\")."
            )

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


def template_reads(ast: nodes.Template) -> Reads:
    """The variables a parsed template reads (Reads): guarded are those under `is defined` / `is undefined`,
    `default(...)` / `d(...)` (all of the tested or defaulted expression, `a[b].c | default(1)` included, as
    Ansible renders it) and the names `'x' in vars` asks about; certain those its render reads for sure."""
    undeclared = meta.find_undeclared_variables(ast)
    guarded: set[str] = set()
    for test in ast.find_all(nodes.Test):
        if test.name in GUARD_TESTS:
            guarded |= _names(test.node)
    for flt in ast.find_all(nodes.Filter):
        if flt.name in GUARD_FILTERS and flt.node is not None:
            guarded |= _names(flt.node)
    for cmp in ast.find_all(nodes.Compare):
        if isinstance(cmp.expr, nodes.Const) and isinstance(cmp.expr.value, str) and \
                any(op.op in ("in", "notin") for op in cmp.ops):
            guarded.add(cmp.expr.value)
    certain: set[str] = set()
    for node in ast.body:
        _certain_in_statement(node, certain)
    every = frozenset(_names(ast) & undeclared)
    return Reads(every, frozenset(certain & undeclared - guarded), frozenset(guarded))


GUARD_TESTS = frozenset({"defined", "undefined"})
GUARD_FILTERS = frozenset({"default", "d"})
# Filters that take an undefined value without failing (Ansible's type_debug names it UndefinedMarker)
LENIENT_FILTERS = GUARD_FILTERS | {"type_debug"}


def _names(node: nodes.Node) -> set[str]:
    return {n.name for n in node.find_all(nodes.Name) if n.ctx == "load"} | (
        {node.name} if isinstance(node, nodes.Name) and node.ctx == "load" else set())


def _certain_in_statement(node: nodes.Node, out: set[str]) -> None:
    """`{{ ... }}` outputs, an `{% if %}`'s test and a `{% for %}`'s list are rendered for sure; what is inside
    an if or a for (maybe never), a macro or a `{% set %}` (only when used) is not."""
    if isinstance(node, nodes.Output):
        for child in node.nodes:
            _certain_in_expression(child, out)
    elif isinstance(node, nodes.If):
        _certain_in_expression(node.test, out)
    elif isinstance(node, nodes.For):
        _certain_in_expression(node.iter, out)


def _certain_in_expression(node: nodes.Node, out: set[str]) -> None:
    """The names an expression fails on when they are undefined: itself, the object of an attribute or item,
    a filter's or test's subject (not under default / is defined), both sides of arithmetic and comparisons, the
    left of and / or, a conditional expression's test; not a filter's or call's arguments, nor list items."""
    if isinstance(node, nodes.Name):
        if node.ctx == "load":
            out.add(node.name)
    elif isinstance(node, (nodes.Getattr, nodes.Getitem)):
        _certain_in_expression(node.node, out)
    elif isinstance(node, nodes.Filter):
        if node.name not in LENIENT_FILTERS and node.node is not None:
            _certain_in_expression(node.node, out)
    elif isinstance(node, nodes.Test):
        if node.name not in GUARD_TESTS:
            _certain_in_expression(node.node, out)
    elif isinstance(node, nodes.Compare):
        for part in [node.expr, *(op.expr for op in node.ops)]:
            _certain_in_expression(part, out)
    elif isinstance(node, (nodes.And, nodes.Or)):
        _certain_in_expression(node.left, out)
    elif isinstance(node, nodes.BinExpr):
        _certain_in_expression(node.left, out)
        _certain_in_expression(node.right, out)
    elif isinstance(node, nodes.UnaryExpr):
        _certain_in_expression(node.node, out)
    elif isinstance(node, nodes.CondExpr):
        _certain_in_expression(node.test, out)
    elif isinstance(node, nodes.Concat):
        for part in node.nodes:
            _certain_in_expression(part, out)


def certain_tasks(items: list, sure: bool = True) -> set[int]:
    """The ids of the tasks that run on every host the play reaches them on and whose failure nothing handles:
    not in a rescue, nor in a block that has one, nor in an include with a `when`; without ignore_errors.
    (Handlers are never here: they run only when notified.)"""
    out: set[int] = set()
    for item in items:
        if isinstance(item, Block):
            out |= certain_tasks(item.block, sure and not item.rescue)
            out |= certain_tasks(item.always, sure)
        elif isinstance(item, Include):
            out |= certain_tasks([item.marker], sure)
            out |= certain_tasks(item.tasks, sure and not item.marker.when and not item.marker.ignore_errors)
        elif sure and not item.ignore_errors:
            out.add(id(item))
    return out
