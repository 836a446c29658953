"""Load and check playbooks and roles before any host is touched.

Everything that can be wrong in the YAML (an unknown keyword, module, role or argument, a missing
required argument) is reported here, with the file and the task, so a bad playbook changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.parsing.yamlfile import LoadBudget, check_variable_names, describe_name, load_yaml
from engine.playbook.keywords import (
    BECOME_KEYWORDS,
    PLAY_KEYWORDS,
    TASK_KEYWORDS,
    become_of,
    condition_list,
    delegate_to_of,
    environment_of,
    flag,
    max_fail_percentage_of,
    names,
    serial_of,
    task_keywords,
    variables_of,
    wrong,
)
from engine.playbook.modulespec import LIBRARY, PROJECT_ROOT, module_args_spec, modules  # noqa: F401 - LIBRARY, PROJECT_ROOT re-exported
from engine.playbook.roles import load_role, role_tasks
from engine.template.templar import Templar


@dataclass
class Task:
    name: str
    module: str
    args: dict
    source: str  # "file: task N" for messages
    role: str | None = None
    role_dir: Path | None = None
    register: str | None = None
    when: list = field(default_factory=list)
    loop: Any = None
    loop_var: str = "item"
    loop_kind: str = "loop"  # or with_items (flattened one level), with_dict, with_together, as Ansible loops them
    retries: int | None = None
    until: Any = None
    delay: float = 5.0
    timeout: float | None = None  # seconds on the host; the worker stops the module past it
    notify: list[str] = field(default_factory=list)
    tags: set[str] = field(default_factory=set)
    ignore_errors: bool = False
    changed_when: Any = None
    failed_when: Any = None
    no_log: bool = False
    vars: dict = field(default_factory=dict)
    listen: list[str] = field(default_factory=list)
    check_mode: bool | None = None
    role_vars: dict = field(default_factory=dict)  # params given to the role in the play
    # None: inherited (block, role entry, play, then the host's ansible_become* variables). See engine/connection/become.py.
    become: bool | None = None
    become_user: str | None = None
    become_method: str | None = None
    any_errors_fatal: bool | None = None  # None: the block's, else the play's
    # `environment` layers, outermost first (play, blocks, the task): mappings or templates giving one, merged per
    # host at run time (an inner layer's keys win), sent with the module call (engine/run/task_executor.py task_environment)
    environment: list = field(default_factory=list)
    run_once: bool = False  # on the first running host of the batch; its result registered on every host
    # where the module runs (an inventory host or localhost; a template rendered with this host's variables):
    # the task is still this host's (its variables render it, its register lands here); set_fact and gathered
    # facts go to the delegate only with delegate_facts (engine/run/delegation.py)
    delegate_to: str | None = None
    delegate_facts: bool = False
    named: bool = True  # the playbook gave it a name (else `name` is the module's)
    action: str = ""  # the module as the playbook spells it (ansible.builtin.copy), for --list-tasks


@dataclass
class Block:
    """Ansible's block: its tasks, the tasks run on the hosts that failed in them (rescue), and the tasks run
    on every host that entered it whatever happened (always). Its when/tags/vars are inherited by its tasks
    at load time, so only rescue and always need the runner's attention."""

    name: str
    source: str
    block: list = field(default_factory=list)  # Task | Block
    rescue: list = field(default_factory=list)
    always: list = field(default_factory=list)


@dataclass
class Include:
    """include_tasks / include_role, read when the playbook loads: `marker` is the include itself (its `when`
    decides per host, and it counts as one ok task, as Ansible's "included: ..."), `tasks` what it brings, run on
    the hosts where the marker ran."""

    marker: Task
    tasks: list = field(default_factory=list)  # Task | Block | Include


def walk_tasks(items: list) -> list[Task]:
    """Every Task in a list of tasks, blocks and includes, depth first (block, rescue, always; an include's
    marker, then its tasks)."""
    out: list[Task] = []
    for item in items:
        if isinstance(item, Block):
            out += walk_tasks(item.block) + walk_tasks(item.rescue) + walk_tasks(item.always)
        elif isinstance(item, Include):
            out += [item.marker] + walk_tasks(item.tasks)
        else:
            out.append(item)
    return out


@dataclass
class Play:
    name: str
    hosts: str
    source: Path
    vars: dict = field(default_factory=dict)
    tasks: list = field(default_factory=list)  # Task | Block, in order
    handlers: list[Task] = field(default_factory=list)
    defaults: dict = field(default_factory=dict)  # every role's defaults, merged in role order
    gather_facts: bool = True
    roles: list[str] = field(default_factory=list)
    serial: list | None = None  # batch sizes (numbers, "N%", templates); None: every host in one batch
    max_fail_percentage: float | None = None  # of a batch; past it the play stops (None: only when all fail)
    become: dict = field(default_factory=dict)  # the play's own become keywords (host lock and facts use them)
    any_errors_fatal: bool = False  # a host failing (or unreachable) stops the play for every host

    def fatal(self, task: Task) -> bool:
        """Whether a failure of `task` stops the play: its own (or its block's) any_errors_fatal, else the play's."""
        return self.any_errors_fatal if task.any_errors_fatal is None else task.any_errors_fatal

    def all_tasks(self) -> list[Task]:
        """Every task and handler of the play, blocks opened (what preflight and secret collection look at)."""
        return walk_tasks(self.tasks) + self.handlers


def _task_name(raw: dict, source: str) -> str | None:
    name = raw.get("name")
    if "name" in raw and not (isinstance(name, str) and name.strip()):
        raise wrong(f"{source} (a task)", "name", "a non-empty string (quote it if it looks like a number)", name, '"Install vLLM"')
    return name


def _task_module(raw: dict, label: str) -> tuple[str, dict]:
    """The one module key of a task and its arguments, checked against the module's argument table."""
    known = modules()
    module_keys = [k for k in raw if k not in TASK_KEYWORDS]
    if not module_keys:
        raise UserError(f"{label}: the task names no module; add one of: {', '.join(sorted(known))}")
    unknown = [k for k in module_keys if k not in known]
    if unknown and len(module_keys) > 1:
        raise UserError(
            f"{label}: unknown task keyword or module '{unknown[0]}'; task keywords are "
            f"{', '.join(sorted(TASK_KEYWORDS))}, modules are {', '.join(sorted(known))}"
        )
    if len(module_keys) > 1:
        raise UserError(f"{label}: the task names several modules ({', '.join(module_keys)}); use one per task")
    module = module_keys[0]
    if unknown:
        raise UserError(
            f"{label}: unknown module '{module}'; available modules: {', '.join(sorted(known))} (or a misspelt task keyword)"
        )
    args = raw[module]
    if args is None:
        args = {}
    if isinstance(args, str) and module in FREE_FORM:
        args = free_form_args(args)
    if "args" in raw:  # Ansible's `args:` keyword: more arguments beside the module's own (which win)
        if not isinstance(raw["args"], dict) or not isinstance(args, dict):
            raise UserError(f"{label}: 'args' must be a mapping of the module's arguments (args: {{chdir: /tmp}})")
        args = {**raw["args"], **args}
    if not isinstance(args, dict):
        raise UserError(f"{label}: the arguments of '{module}' must be a mapping (key: value lines), not {type(args).__name__}")
    _check_module_args(module, args, label)
    return module, args


FREE_FORM = ("command", "shell")  # modules that take Ansible's one-line form: `- command: ls -l /tmp creates=/x`
_TRAILING_OPTION = re.compile(
    r"""\s+(creates|removes|chdir|executable|stdin)=("[^"]*"|'[^']*'|(?:\{\{.*?\}\}|\S)+)\s*$""")  # {{ }} may hold spaces


def free_form_args(text: str) -> dict:
    """`- command: CMD [creates=P] [chdir=D] ...`: the command line (split on the host as Ansible splits it, never
    run through a shell by command) and the options written after it, as Ansible reads them."""
    options: dict = {}
    while match := _TRAILING_OPTION.search(text):
        value = match.group(2)
        options.setdefault(match.group(1), value[1:-1] if value[:1] in "\"'" else value)
        text = text[:match.start()]
    return {"cmd": text.strip(), **options}


def _check_module_args(module: str, args: dict, label: str) -> None:
    spec = module_args_spec(module)
    if spec is None:  # set_fact: its arguments become variables
        check_variable_names(args, f"{label}: '{module}'")
        return
    bad_names = [a for a in args if not isinstance(a, str)]
    if bad_names:
        raise UserError(f"{label}: argument name {describe_name(bad_names[0])} of '{module}' must be a string; fix that key")
    if module == "copy":  # `src:` on the control node is handled by the engine (see Runner._action_copy)
        spec = dict(spec, src={"type": "str"})
    unknown_args = sorted(set(args) - set(spec))
    if unknown_args:
        raise UserError(
            f"{label}: module '{module}' has no argument(s) {', '.join(unknown_args)}; it accepts: {', '.join(sorted(spec))}"
        )
    # A required argument linked to a variable may be left out: preflight checks the variable is defined.
    missing = [a for a, o in spec.items() if o.get("required") and a not in args and not o.get("var")]
    if missing:
        raise UserError(f"{label}: module '{module}' needs argument(s) {', '.join(missing)}")


def parse_task(raw: Any, source: str, role: str | None = None, role_dir: Path | None = None) -> Task:
    """One task, every keyword checked; `source` is "file: task N" for messages."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: a task must be a mapping with a name and one module, got {type(raw).__name__}")
    name = _task_name(raw, source)
    label = f"{source} ('{name or '?'}')"
    if isinstance(raw.get("meta"), str):  # `- meta: flush_handlers`: Ansible's free-form argument
        raw = {**raw, "meta": {"action": raw["meta"]}}
    module, args = _task_module(raw, label)
    return Task(name=name or module, module=module, args=args, source=source, role=role, role_dir=role_dir,
                named=name is not None, **task_keywords(raw, label))


BLOCK_KEYWORDS = {"block", "rescue", "always", "name", "when", "tags", "vars", "any_errors_fatal", "environment",
                  "delegate_to", *BECOME_KEYWORDS}


def inherit_become(tasks: list[Task], become: dict) -> None:
    """become/become_user/become_method (and a block's any_errors_fatal) given above (block, role entry, play)
    apply where the task says nothing."""
    for task in tasks:
        for key, value in become.items():
            if getattr(task, key) is None:
                setattr(task, key, value)


def _inherit(items: list, when: list, tags: set[str], block_vars: dict, become: dict) -> None:
    """A block's when/tags/vars/become/any_errors_fatal apply to every task inside it (the task's own win)."""
    for task in walk_tasks(items):
        task.when = when + task.when
        task.tags |= tags
        task.vars = {**block_vars, **task.vars}
    inherit_become(walk_tasks(items), become)


def parse_block(raw: dict, source: str, ctx: ParseContext) -> Block:
    where = f"{source} (block '{raw.get('name', '?')}')"
    bad = sorted(map(str, set(raw) - BLOCK_KEYWORDS))
    if bad:
        raise UserError(f"{where}: unknown block keyword(s) {', '.join(bad)}; a block may have {', '.join(sorted(BLOCK_KEYWORDS))}")
    parts = {}
    for key in ("block", "rescue", "always"):
        if key in raw and not isinstance(raw[key], list):
            raise wrong(where, key, "a list of tasks", raw[key], "[{name: ..., command: ...}]")
        parts[key] = parse_tasks(raw.get(key), f"{source} {key}", ctx)
    block = Block(name=str(raw.get("name") or "block"), source=source, **parts)
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    inherited = become_of(raw, where)
    if "any_errors_fatal" in raw:
        inherited["any_errors_fatal"] = flag(raw["any_errors_fatal"], where, "any_errors_fatal")
    if "delegate_to" in raw:
        inherited["delegate_to"] = delegate_to_of(raw["delegate_to"], where)
    _inherit(block.block + block.rescue + block.always, when, tags, variables_of(raw.get("vars"), where), inherited)
    if "environment" in raw:
        inherit_environment(walk_tasks(block.block + block.rescue + block.always), environment_of(raw["environment"], where))
    return block


def inherit_environment(tasks: list[Task], layer: dict | str) -> None:
    """An `environment` given above (block, play) applies to every task below it; the task's own keys win."""
    for task in tasks:
        task.environment = [layer, *task.environment]


@dataclass
class ParseContext:
    """Where tasks are being read: the playbook (roles are found beside it), the play (import_role adds the
    role's defaults and handlers to it), the role the tasks belong to, the files being read (`including`), and
    the budget of the whole load (every file and task it brings in, engine/parsing/yamlfile.py LoadBudget)."""

    playbook: Path
    play: Play | None = None
    role: str | None = None
    role_dir: Path | None = None
    # (resolved path, label) of each file being read, outermost first: the playbook, the playbooks, roles and task
    # files it imports, down to this one (engine/playbook/loader.py enter: none may bring itself in)
    including: tuple = ()
    budget: LoadBudget = None  # type: ignore[assignment] # None: a load of its own (__post_init__)

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = LoadBudget(self.playbook)


MAX_IMPORT_DEPTH = 20  # playbooks, roles and task files read inside one another; ours nest 3 deep


def enter(ctx: ParseContext, path: Path, label: str, source: str, key: str) -> ParseContext:
    """The context for reading `path` (a playbook, a role's tasks or handlers, a task file) that `key` at `source`
    brings in. The one rule for every import and include (import_playbook, a play's roles, import_role and
    include_role, import_tasks and include_tasks): a file that is already being read would be read without end,
    so it is one paragraph naming the cycle; so is a chain deeper than MAX_IMPORT_DEPTH."""
    path = path.resolve()
    chain = [*ctx.including, (path, label)]
    first = next((i for i, (p, _) in enumerate(ctx.including) if p == path), None)
    if first is not None:
        cycle = " -> ".join(shown for _, shown in chain[first:])
        raise UserError(
            f"{source}: {key} brings in {label}, which imports itself ({cycle}): it would be read without end. "
            "Remove the import (or include) that closes the cycle; a playbook, role or task file may not bring "
            "itself in, directly or through others."
        )
    if len(chain) > MAX_IMPORT_DEPTH:
        raise UserError(
            f"{source}: {key} brings in {label}, nesting imports more than {MAX_IMPORT_DEPTH} deep "
            f"({' -> '.join(shown for _, shown in chain)}; MAX_IMPORT_DEPTH in engine/playbook/loader.py); import the "
            "files from fewer levels."
        )
    return replace(ctx, including=tuple(chain))


ANSIBLE_COLLECTIONS = ("ansible.builtin.", "ansible.legacy.")  # their names of our modules and task keywords


def short_names(raw: Any, source: str) -> Any:
    """A task's keys as we read them: `ansible.builtin.copy` and `ansible.legacy.copy` are `copy` (as in Ansible,
    where the short name resolves to ansible.builtin); any other collection's module is refused by name."""
    if not isinstance(raw, dict) or not any(isinstance(k, str) and "." in k for k in raw):
        return raw
    out: dict = {}
    for key, value in raw.items():
        short = key
        if isinstance(key, str) and key.startswith(ANSIBLE_COLLECTIONS):
            short = key.split(".", 2)[2]
        elif isinstance(key, str) and key.count(".") >= 2:
            collection = key.rsplit(".", 1)[0]
            raise UserError(
                f"{source}: module '{key}' is from the collection '{collection}', which dflash-provision does not "
                f"run (it has its own modules, reachable as ansible.builtin.NAME or NAME: {', '.join(sorted(modules()))}); "
                "replace the task with one of them, or run that playbook with ansible-playbook"
            )
        if short in out:
            raise UserError(f"{source}: the task names '{short}' twice ('{key}' and another spelling); keep one")
        out[short] = value
    return out


def _parse_entry(raw: Any, source: str, ctx: ParseContext) -> list:
    """One entry of a task list: a task, a block, or `import_role` (the role's tasks, in place)."""
    spelled = raw
    raw = short_names(raw, source)
    if isinstance(raw, dict) and "block" in raw:
        return [parse_block(raw, source, ctx)]
    if isinstance(raw, dict) and {"import_role", "include_role"} & set(raw):
        if ctx.play is None:
            raise UserError(f"{source}: import_role and include_role are not allowed here (handlers)")
        return spelled_include(import_role(raw, source, ctx), spelled)
    if isinstance(raw, dict) and ({"import_tasks", "include_tasks"} & set(raw)):
        return spelled_include(import_tasks(raw, source, ctx), spelled)
    task = parse_task(raw, source, ctx.role, ctx.role_dir)
    task.action = spelled_module(spelled, task.module)
    return [task]


def spelled_include(items: list, raw: dict) -> list:
    """An include's marker named by its key as spelled (ansible.builtin.include_role), for --list-tasks."""
    for item in items:
        if isinstance(item, Include):
            item.marker.action = spelled_module(raw, item.marker.module)
    return items


def spelled_module(raw: dict, module: str) -> str:
    """The module's key as the playbook spells it (ansible.builtin.copy or copy)."""
    return next((k for k in raw if isinstance(k, str) and k.rsplit(".", 1)[-1] == module), module)


def parse_tasks(items: Any, path: Path | str, ctx: ParseContext | None = None) -> list:
    """A list of tasks (and blocks, and imported roles), every keyword checked."""
    ctx = ctx or ParseContext(Path(str(path)))
    if items is None:
        return []
    if not isinstance(items, list):
        raise UserError(f"{path}: tasks must be a list (each entry starting with '- name:')")
    out: list = []
    for i, raw in enumerate(items):
        source = f"{path}: task {i + 1}"
        ctx.budget.charge(source, "task", tasks=1)  # every entry, each time its file is imported
        out += _parse_entry(raw, source, ctx)
    return out


IMPORT_KEYS = {"name", "vars", "when", "tags", "environment", *BECOME_KEYWORDS}


def import_tasks(raw: dict, source: str, ctx: ParseContext) -> list:
    """`- import_tasks: FILE` (or include_tasks) with optional vars/when/tags/become: the file's tasks here, each
    with those keywords, as Ansible's static import does. The file is found beside the role's tasks (the role's
    folder, then its tasks/ folder), else beside the playbook. include_tasks is read the same way, when the
    playbook loads: its `when` is checked for each task, and a templated file name or a loop is refused."""
    key = next(k for k in raw if k.split(".")[-1] in ("import_tasks", "include_tasks"))
    spec = raw[key]
    file = spec.get("file") if isinstance(spec, dict) and set(spec) == {"file"} else spec
    bad = sorted(map(str, set(raw) - IMPORT_KEYS - {key}))
    if bad or not isinstance(file, str) or not file.strip() or "{{" in file or "{%" in file:
        why = f"unknown keyword(s) {', '.join(bad)} (a loop over includes is not supported)" if bad else \
            "the file must be a name written in the playbook (not templated)"
        raise UserError(f"{source}: {key}: {why}; write `- {key}: FILE.yaml` with optional vars, when, tags and become")
    path = _task_file(file, source, ctx)
    inner = enter(ctx, path, str(path), source, f"{key} {file}")
    tasks = parse_tasks(load_yaml(path, "task file", ctx.budget), path, inner)
    where = f"{source} ({key} {file})"
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    import_vars = variables_of(raw.get("vars"), where)
    dynamic = key.split(".")[-1] == "include_tasks" and ctx.play is not None  # in handlers: read as an import
    _inherit(tasks, [] if dynamic else when, tags, import_vars, become_of(raw, where))
    if "environment" in raw:
        inherit_environment(walk_tasks(tasks), environment_of(raw["environment"], where))
    _name_with(walk_tasks(tasks), import_vars)
    if dynamic:
        return [include_of(raw, key, {"file": file}, source, ctx, tasks, when, tags, import_vars)]
    return tasks


def include_of(raw: dict, key: str, args: dict, source: str, ctx: ParseContext, tasks: list, when: list,
               tags: set, include_vars: dict) -> Include:
    """The Include of include_tasks / include_role: its marker task (named as the playbook names it, with the
    include's when, tags and vars) and the tasks it brings."""
    short = key.split(".")[-1]
    marker = Task(name=raw.get("name") or short, module=short, args=args, source=source, role=ctx.role,
                  role_dir=ctx.role_dir, when=list(when), tags=set(tags), vars=dict(include_vars),
                  named="name" in raw, action=key)
    return Include(marker, tasks)


def _name_with(tasks, import_vars: dict) -> None:
    """Task names of an imported file that use the import's vars, rendered with them when the file is read (as
    Ansible shows them), so one file imported twice reads as two steps. A name needing anything else stays
    as written."""
    if not import_vars:
        return
    templar = Templar()
    for task in tasks:
        if "{{" in task.name:
            try:
                task.name = str(templar.render_value(task.name, templar.view(dict(import_vars))))
            except Exception:  # noqa: S112 - a name with other variables is shown as written, like Ansible's
                continue


def _task_file(file: str, source: str, ctx: ParseContext) -> Path:
    """An imported task file: beside the role (its folder, then tasks/), else beside the playbook."""
    folders = ([ctx.role_dir, ctx.role_dir / "tasks"] if ctx.role_dir is not None else [])
    folders += [ctx.playbook.parent, ctx.playbook.parent / "tasks"]
    candidates = [Path(file)] if Path(file).is_absolute() else [f / file for f in folders]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    raise UserError(f"{source}: task file '{file}' not found; looked in {', '.join(str(c) for c in candidates)}")


def import_role(raw: dict, source: str, ctx: ParseContext) -> list:
    """`- import_role: {name: ROLE, tasks_from: FILE}` with optional vars/when/tags: the role's tasks (or those of
    its FILE) here, its defaults and handlers added to the play, as Ansible's static import does. include_role is
    read the same way when the playbook loads (its `when` checked for each task; a loop over it is refused)."""
    key = "import_role" if "import_role" in raw else "include_role"
    spec = raw[key]
    bad = sorted(map(str, set(raw) - {key, "name", "vars", "when", "tags", "environment", *BECOME_KEYWORDS}))
    bad += sorted(f"{key}.{k}" for k in (spec if isinstance(spec, dict) else {}) if k not in ("name", "tasks_from"))
    if bad or not (isinstance(spec, dict) and isinstance(spec.get("name"), str) and "{{" not in spec["name"]):
        raise UserError(f"{source}: write {key} as `- {key}: {{name: ROLE}}` (a role name written in the playbook, "
                        f"optionally with tasks_from: FILE) and vars, when, tags and become beside it"
                        f"{'; not supported: ' + ', '.join(bad) if bad else ''}")
    entry = {"role": spec["name"], **{k: raw[k] for k in ("vars", "when", "tags", *BECOME_KEYWORDS) if k in raw}}
    if "tasks_from" in spec:
        entry["tasks_from"] = spec["tasks_from"]
    assert ctx.play is not None  # noqa: S101 - _parse_entry checked it
    when = entry.pop("when", None) if key == "include_role" else None  # the include's own, not each task's
    tasks = role_tasks(entry, source, ctx, key)
    if "environment" in raw:
        inherit_environment(walk_tasks(tasks), environment_of(raw["environment"], source))
    if key == "include_role":
        where = f"{source} (include_role {spec['name']})"
        tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
        args = {k: spec[k] for k in ("name", "tasks_from") if k in spec}
        conditions = condition_list(when, where, "when") if when is not None else []
        return [include_of(raw, key, args, source, ctx, tasks, conditions, tags, variables_of(raw.get("vars"), where))]
    return tasks


def _play_hosts(raw: dict, where: str) -> str:
    """`hosts`: a pattern, or a list of names/patterns (joined with ',')."""
    if "hosts" not in raw:
        raise UserError(f"{where}: the play has no 'hosts:' (a host, group or pattern, e.g. all)")
    hosts = raw["hosts"]
    items = hosts if isinstance(hosts, list) else [hosts]
    if not items or not all(isinstance(h, str) and h.strip() for h in items):
        raise wrong(where, "hosts", "a host, group or pattern (a string), or a list of them", hosts, "gpu")
    return ",".join(items)


def _parse_play(raw: Any, path: Path, where: str, loading: ParseContext) -> Play:
    """One play: keywords checked, then its pre_tasks, roles, tasks and handlers loaded (`loading`: the
    playbook's load, which the play's files join)."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a play must be a mapping with 'hosts:'")
    bad = sorted(map(str, set(raw) - PLAY_KEYWORDS))
    if bad:
        raise UserError(f"{where}: unknown play keyword(s) {', '.join(bad)}; a play may have {', '.join(sorted(PLAY_KEYWORDS))}")
    hosts = _play_hosts(raw, where)
    name = raw.get("name", hosts)
    if not (isinstance(name, str) and name.strip()):
        raise wrong(where, "name", "a non-empty string", name, '"Provision the GPU hosts"')
    play = Play(name=name, hosts=hosts, source=path, vars=variables_of(raw.get("vars"), where))
    if "gather_facts" in raw:
        play.gather_facts = flag(raw["gather_facts"], where, "gather_facts")
    if "any_errors_fatal" in raw:
        play.any_errors_fatal = flag(raw["any_errors_fatal"], where, "any_errors_fatal")
    play_tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    ctx = replace(loading, play=play)
    play.tasks.extend(parse_tasks(raw.get("pre_tasks"), path, ctx))
    roles = raw.get("roles") or []
    if not isinstance(roles, list):
        raise UserError(f"{where}: 'roles' must be a list of role names")
    for entry in roles:
        load_role(entry, where, ctx)
    play.tasks.extend(parse_tasks(raw.get("tasks"), path, ctx))
    play.handlers.extend(parse_tasks(raw.get("handlers"), path, loading))
    for t in play.all_tasks():
        t.tags |= play_tags
    play.become = become_of(raw, where)
    inherit_become(play.all_tasks(), play.become)
    if "environment" in raw:
        inherit_environment(play.all_tasks(), environment_of(raw["environment"], where))
    if "serial" in raw:
        play.serial = serial_of(raw["serial"], where)
    if "max_fail_percentage" in raw:
        play.max_fail_percentage = max_fail_percentage_of(raw["max_fail_percentage"], where)
    _check_notified_handlers(play)
    return play


def _check_notified_handlers(play: Play) -> None:
    names = {h.name for h in play.handlers} | {n for h in play.handlers for n in h.listen}
    for t in walk_tasks(play.tasks):
        for n in t.notify:
            if n not in names:
                raise UserError(
                    f"{t.source} ('{t.name}'): notifies '{n}', but no handler has that name; handlers: {', '.join(sorted(names)) or '(none)'}"
                )


def load_playbook(path: str | Path, budget: LoadBudget | None = None) -> list[Play]:
    """Every play of a playbook (and of the playbooks it imports, in place), checked before any host is touched;
    everything it brings in is read within one budget (engine/parsing/yamlfile.py LoadBudget; a fresh one by default)."""
    path = Path(path)
    return _load_playbook(path, ParseContext(path, including=((path.resolve(), str(path)),),
                                             budget=budget or LoadBudget(path)))


def _load_playbook(path: Path, ctx: ParseContext) -> list[Play]:
    """The plays of the playbook `path`; `ctx`: the load it is part of, `path` entered in it."""
    data = load_yaml(path, "playbook", ctx.budget)
    if not isinstance(data, list):
        raise UserError(f"{path}: a playbook is a list of plays, each starting with '- hosts:'")
    loading = ParseContext(path, including=ctx.including, budget=ctx.budget)  # its own roles and task files
    plays: list[Play] = []
    for i, raw in enumerate(data):
        raw = short_names(raw, f"{path}: play {i + 1}")
        if isinstance(raw, dict) and "import_playbook" in raw:
            plays += import_playbook(raw, path, f"{path}: play {i + 1}", loading)
        else:
            plays.append(_parse_play(raw, path, f"{path}: play {i + 1}", loading))
    return plays


IMPORT_PLAYBOOK_KEYS = {"import_playbook", "name", "vars", "tags", "when"}


def import_playbook(raw: dict, path: Path, where: str, ctx: ParseContext) -> list[Play]:
    """`- import_playbook: FILE` (beside the importing playbook, or absolute) with optional vars, tags and when:
    its plays here, as Ansible's static import: the vars given win over each play's own, the tags and the
    condition go to every task. A templated name, a cycle or a missing file is refused at load."""
    file = raw["import_playbook"]
    bad = sorted(map(str, set(raw) - IMPORT_PLAYBOOK_KEYS))
    if bad or not (isinstance(file, str) and file.strip()) or "{{" in file or "{%" in file:
        why = f"unknown keyword(s) {', '.join(bad)}" if bad else "the file must be a name written in the playbook"
        raise UserError(f"{where}: import_playbook: {why}; write `- import_playbook: FILE.yaml` with optional vars, "
                        "tags and when")
    target = Path(file) if Path(file).is_absolute() else path.parent / file
    if not target.is_file():
        raise UserError(f"{where}: import_playbook: '{file}' not found (looked for {target}); fix the path")
    inner = enter(ctx, target, str(target), where, f"import_playbook {file}")
    given = variables_of(raw.get("vars"), where)
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    plays = _load_playbook(target, inner)
    for play in plays:
        play.vars = {**play.vars, **given}
        for task in play.all_tasks():
            task.tags |= tags
            task.when = when + task.when
    return plays
