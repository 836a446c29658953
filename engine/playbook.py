"""Load and check playbooks and roles before any host is touched.

Everything that can be wrong in the YAML (an unknown keyword, module, role or argument, a missing
required argument) is reported here, with the file and the task, so a bad playbook changes nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.yamlfile import load_yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LIBRARY = PROJECT_ROOT / "library"

TASK_KEYWORDS = {
    "name",
    "register",
    "when",
    "loop",
    "with_items",
    "loop_control",
    "retries",
    "until",
    "delay",
    "notify",
    "tags",
    "ignore_errors",
    "changed_when",
    "failed_when",
    "no_log",
    "vars",
    "listen",
    "check_mode",
}
PLAY_KEYWORDS = {"name", "hosts", "vars", "roles", "tasks", "handlers", "gather_facts", "tags", "pre_tasks"}

# Actions the engine performs on the control node (no module runs for them on the host, or the
# engine prepares what the host module receives).
ENGINE_ACTIONS: dict[str, dict] = {
    "assert": {"that": {"type": "raw", "required": True}, "fail_msg": {"type": "str"}, "success_msg": {"type": "str"}},
    "fail": {"msg": {"type": "str", "default": "failed as requested"}},
    "debug": {"msg": {"type": "raw"}, "var": {"type": "str"}},
    "set_fact": None,  # any names
    "template": {
        "src": {"type": "str", "required": True},
        "dest": {"type": "path", "required": True},
        "mode": {"type": "str"},
        "owner": {"type": "str"},
        "group": {"type": "str"},
        "backup": {"type": "bool", "default": False},
    },
}


@dataclass
class ModuleSpec:
    name: str
    path: Path | None  # None for engine actions
    args: dict | None  # None = accepts anything


_MODULES: dict[str, ModuleSpec] | None = None


def _read_args_literal(path: Path) -> dict:
    """ARGS of a module, read without importing it (modules import host-only packages)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ARGS" for t in node.targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise UserError(f"{path}: ARGS must be a literal dict (the engine reads it without importing)") from None
    raise UserError(f"{path}: a module must define ARGS = {{...}}")


def modules() -> dict[str, ModuleSpec]:
    global _MODULES
    if _MODULES is None:
        found = {}
        for p in sorted(LIBRARY.glob("*.py")):
            if not p.name.startswith("_"):
                found[p.stem] = ModuleSpec(p.stem, p, None)
        for name, spec in ENGINE_ACTIONS.items():
            found[name] = ModuleSpec(name, None, spec)
        _MODULES = found
    return _MODULES


def module_args_spec(name: str) -> dict | None:
    spec = modules()[name]
    if spec.args is None and spec.path is not None:
        spec.args = _read_args_literal(spec.path)
    return spec.args


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
    retries: int | None = None
    until: Any = None
    delay: float = 5.0
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


@dataclass
class Play:
    name: str
    hosts: str
    source: Path
    vars: dict = field(default_factory=dict)
    tasks: list[Task] = field(default_factory=list)
    handlers: list[Task] = field(default_factory=list)
    defaults: dict = field(default_factory=dict)  # every role's defaults, merged in role order
    gather_facts: bool = True
    roles: list[str] = field(default_factory=list)


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def parse_task(raw: Any, source: str, role: str | None = None, role_dir: Path | None = None) -> Task:
    if not isinstance(raw, dict):
        raise UserError(f"{source}: a task must be a mapping with a name and one module, got {type(raw).__name__}")
    label = f"{source} ('{raw.get('name', '?')}')"
    known = modules()
    module_keys = [k for k in raw if k not in TASK_KEYWORDS]
    if not module_keys:
        raise UserError(f"{label}: the task names no module; add one of: {', '.join(sorted(known))}")
    if len(module_keys) > 1:
        unknown = [k for k in module_keys if k not in known]
        if unknown:
            raise UserError(
                f"{label}: unknown task keyword or module '{unknown[0]}'; task keywords are "
                f"{', '.join(sorted(TASK_KEYWORDS))}, modules are {', '.join(sorted(known))}"
            )
        raise UserError(f"{label}: the task names several modules ({', '.join(module_keys)}); use one per task")
    module = module_keys[0]
    if module not in known:
        raise UserError(
            f"{label}: unknown module '{module}'; available modules: {', '.join(sorted(known))} (or a misspelt task keyword)"
        )
    args = raw[module]
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise UserError(f"{label}: the arguments of '{module}' must be a mapping (key: value lines), not {type(args).__name__}")
    spec = module_args_spec(module)
    if spec is not None:
        if module == "copy":  # `src:` on the control node is handled by the engine (see Runner._action_copy)
            spec = dict(spec, src={"type": "str"})
        unknown_args = sorted(set(args) - set(spec))
        if unknown_args:
            raise UserError(
                f"{label}: module '{module}' has no argument(s) {', '.join(unknown_args)}; it accepts: {', '.join(sorted(spec))}"
            )
        missing = [a for a, o in spec.items() if o.get("required") and a not in args]
        if missing:
            raise UserError(f"{label}: module '{module}' needs argument(s) {', '.join(missing)}")
    loop = raw.get("loop", raw.get("with_items"))
    loop_control = raw.get("loop_control") or {}
    if not isinstance(loop_control, dict):
        raise UserError(f"{label}: 'loop_control' must be a mapping, e.g. loop_control: {{loop_var: model}}")
    register = raw.get("register")
    if register is not None and not (isinstance(register, str) and register.isidentifier()):
        raise UserError(f"{label}: 'register' must be a variable name, got {register!r}")
    try:
        retries = raw.get("retries")
        retries = int(retries) if retries is not None else None
        delay = float(raw.get("delay", 5.0))
    except (TypeError, ValueError):
        raise UserError(f"{label}: 'retries' must be an integer and 'delay' a number of seconds") from None
    task_vars = raw.get("vars") or {}
    if not isinstance(task_vars, dict):
        raise UserError(f"{label}: 'vars' must be a mapping")
    return Task(
        name=str(raw.get("name") or module),
        module=module,
        args=args,
        source=source,
        role=role,
        role_dir=role_dir,
        register=register,
        when=_as_list(raw.get("when")),
        loop=loop,
        loop_var=str(loop_control.get("loop_var", "item")),
        retries=retries,
        until=raw.get("until"),
        delay=delay,
        notify=[str(n) for n in _as_list(raw.get("notify"))],
        tags={str(t) for t in _as_list(raw.get("tags"))},
        ignore_errors=bool(raw.get("ignore_errors", False)),
        changed_when=raw.get("changed_when"),
        failed_when=raw.get("failed_when"),
        no_log=bool(raw.get("no_log", False)),
        vars=task_vars,
        listen=[str(n) for n in _as_list(raw.get("listen"))],
        check_mode=raw.get("check_mode"),
    )


def parse_tasks(items: Any, path: Path, role: str | None = None, role_dir: Path | None = None) -> list[Task]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise UserError(f"{path}: tasks must be a list (each entry starting with '- name:')")
    return [parse_task(raw, f"{path}: task {i + 1}", role, role_dir) for i, raw in enumerate(items)]


def role_search_dirs(playbook: Path) -> list[Path]:
    dirs = [playbook.parent / "roles", playbook.parent.parent / "roles", PROJECT_ROOT / "roles"]
    out = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


def find_role(name: str, playbook: Path, where: str) -> Path:
    for d in role_search_dirs(playbook):
        if (d / name).is_dir():
            return d / name
    available = sorted({p.name for d in role_search_dirs(playbook) for p in d.iterdir() if p.is_dir()})
    raise UserError(f"{where}: unknown role '{name}'; available roles: {', '.join(available) or '(none)'}")


def _role_file(role_dir: Path, stem: str) -> Path | None:
    for suffix in (".yaml", ".yml"):
        p = role_dir / f"{stem}{suffix}"
        if p.is_file():
            return p
    return None


def load_role(entry: Any, playbook: Path, where: str, play: Play) -> None:
    if isinstance(entry, str):
        name, params = entry, {}
    elif isinstance(entry, dict) and "role" in entry:
        name = str(entry["role"])
        if not isinstance(entry.get("vars") or {}, dict):
            raise UserError(f"{where}: 'vars' of role '{name}' must be a mapping")
        params = dict(entry.get("vars") or {})
        params.update({k: v for k, v in entry.items() if k not in ("role", "vars", "tags", "when")})
        role_tags = {str(t) for t in _as_list(entry.get("tags"))}
        role_when = _as_list(entry.get("when"))
    else:
        raise UserError(f"{where}: a role entry must be a name or a mapping with 'role:'")
    if isinstance(entry, str):
        role_tags, role_when = set(), []
    role_dir = find_role(name, playbook, where)
    defaults_file = _role_file(role_dir, "defaults")
    if defaults_file:
        defaults = load_yaml(defaults_file, "role defaults") or {}
        if not isinstance(defaults, dict):
            raise UserError(f"{defaults_file}: role defaults must be a mapping of variable names to values")
        play.defaults.update(defaults)
    tasks_file = _role_file(role_dir, "tasks")
    tasks = parse_tasks(load_yaml(tasks_file, "role tasks"), tasks_file, name, role_dir) if tasks_file else []
    handlers_file = _role_file(role_dir, "handlers")
    handlers = parse_tasks(load_yaml(handlers_file, "role handlers"), handlers_file, name, role_dir) if handlers_file else []
    for t in tasks + handlers:
        t.tags |= role_tags | {name}
        t.when = role_when + t.when
        t.role_vars = params
    play.tasks.extend(tasks)
    play.handlers.extend(handlers)
    play.roles.append(name)


def load_playbook(path: str | Path) -> list[Play]:
    path = Path(path)
    data = load_yaml(path, "playbook")
    if not isinstance(data, list):
        raise UserError(f"{path}: a playbook is a list of plays, each starting with '- hosts:'")
    plays = []
    for i, raw in enumerate(data):
        where = f"{path}: play {i + 1}"
        if not isinstance(raw, dict):
            raise UserError(f"{where}: a play must be a mapping with 'hosts:'")
        bad = sorted(set(raw) - PLAY_KEYWORDS)
        if bad:
            raise UserError(
                f"{where}: unknown play keyword(s) {', '.join(bad)}; a play may have {', '.join(sorted(PLAY_KEYWORDS))}"
            )
        if "hosts" not in raw:
            raise UserError(f"{where}: the play has no 'hosts:' (a host, group or pattern, e.g. all)")
        play_vars = raw.get("vars") or {}
        if not isinstance(play_vars, dict):
            raise UserError(f"{where}: 'vars' must be a mapping")
        hosts = raw["hosts"]
        if isinstance(hosts, list):
            hosts = ",".join(map(str, hosts))
        play = Play(
            name=str(raw.get("name") or hosts),
            hosts=str(hosts),
            source=path,
            vars=play_vars,
            gather_facts=bool(raw.get("gather_facts", True)),
        )
        play_tags = {str(t) for t in _as_list(raw.get("tags"))}
        play.tasks.extend(parse_tasks(raw.get("pre_tasks"), path))
        roles = raw.get("roles") or []
        if not isinstance(roles, list):
            raise UserError(f"{where}: 'roles' must be a list of role names")
        for entry in roles:
            load_role(entry, path, where, play)
        play.tasks.extend(parse_tasks(raw.get("tasks"), path))
        play.handlers.extend(parse_tasks(raw.get("handlers"), path))
        for t in play.tasks + play.handlers:
            t.tags |= play_tags
        names = {h.name for h in play.handlers} | {n for h in play.handlers for n in h.listen}
        for t in play.tasks:
            for n in t.notify:
                if n not in names:
                    raise UserError(
                        f"{t.source} ('{t.name}'): notifies '{n}', but no handler has that name; handlers: {', '.join(sorted(names)) or '(none)'}"
                    )
        plays.append(play)
    return plays
