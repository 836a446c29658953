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
from engine.yamlfile import check_variable_names, describe_name, is_variable_name, load_yaml

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
    "timeout",
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

    def all_tasks(self) -> list[Task]:
        """Every task and handler of the play (what preflight and secret collection look at)."""
        return self.tasks + self.handlers


# -- keyword checks ---------------------------------------------------------------------------------
# Each returns the value in the type the runner expects, or raises one paragraph naming the place,
# the keyword and the fix. They run at load time, so a wrongly typed keyword changes no host.

_BOOL_STRINGS = {"yes": True, "true": True, "on": True, "1": True, "no": False, "false": False, "off": False, "0": False}
# The runner reads these flags as plain booleans (it does not render them), so a template is refused.
_FLAG_KEYWORDS = ("ignore_errors", "no_log", "check_mode", "gather_facts")
LOOP_CONTROL_KEYS = {"loop_var"}  # the only loop_control key the runner implements
MAX_DELAY_S = 86400.0


def _is_template(value: Any) -> bool:
    """engine.templating.is_template, imported when needed: it loads Jinja2, which checking a playbook does not need."""
    from engine.templating import is_template

    return isinstance(value, str) and is_template(value)


def _shown(value: Any) -> str:
    """A keyword's value in a message: short strings quoted, anything else by its type."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
    if value is None:
        return "nothing (an empty value)"
    if isinstance(value, (bool, int, float)):
        return f"{type(value).__name__} {value!r}"
    return f"a {'mapping' if isinstance(value, dict) else type(value).__name__}"


def _wrong(where: str, key: str, expected: str, value: Any, example: str) -> UserError:
    return UserError(f"{where}: '{key}' must be {expected}, got {_shown(value)}. Write it like: {key}: {example}")


def _condition_list(value: Any, where: str, key: str) -> list:
    """`when` and friends: a Jinja2 expression, a boolean, or a list of those (all must hold)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, bool) or (isinstance(item, str) and item.strip()):
            continue
        raise _wrong(where, key, "an expression (a string), true/false, or a list of those", item, "result.rc == 0")
    return list(items)


def _condition(value: Any, where: str, key: str) -> str | bool:
    """`changed_when`/`failed_when`/`until` are evaluated once: a list becomes one expression joined with `and`."""
    items = _condition_list(value, where, key)
    if not items:
        raise _wrong(where, key, "at least one condition", value, "result.rc != 0")
    if len(items) == 1:
        return items[0]
    return " and ".join(f"({str(item).lower() if isinstance(item, bool) else item})" for item in items)


def _flag(value: Any, where: str, key: str) -> bool:
    """A boolean, or one of Ansible's boolean words (yes/no, true/false, on/off, 1/0; any case)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _BOOL_STRINGS:
        return _BOOL_STRINGS[value.strip().lower()]
    if _is_template(value):
        raise UserError(
            f"{where}: '{key}' is a template ({_shown(value)}), which is not supported for '{key}' (the engine "
            f"reads it as a plain true/false). Write {key}: true or {key}: false."
        )
    raise _wrong(where, key, "true or false (or yes/no, on/off, 1/0)", value, "true")


def _retries(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _wrong(where, "retries", "a whole number >= 0", value, "3")
    return value


def _delay(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DELAY_S:
        raise _wrong(where, "delay", f"a number of seconds from 0 to {MAX_DELAY_S:.0f}", value, "5")
    return float(value)


def _timeout(value: Any, where: str) -> float:
    """`timeout`: seconds a task may run on the host before the worker stops it (as Ansible's keyword)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_DELAY_S:
        raise _wrong(where, "timeout", f"a number of seconds above 0, at most {MAX_DELAY_S:.0f}", value, "600")
    return float(value)


def _names(value: Any, where: str, key: str) -> list[str]:
    """`notify`/`tags`/`listen`: a string or a list of strings."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not (isinstance(item, str) and item.strip()):
            raise _wrong(where, key, "a name or a list of names (strings)", item, "[name1, name2]")
    return list(items)


def _identifier(value: Any, where: str, key: str) -> str:
    if not is_variable_name(value):
        raise _wrong(where, key, "a variable name (letters, digits and _, not starting with a digit)", value, "my_result")
    return value


def _variables(value: Any, where: str, key: str = "vars") -> dict:
    """A mapping of variable names to values (an empty `vars:` is an empty mapping)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _wrong(where, key, "a mapping of variable names to values", value, "{model_path: /models/x}")
    check_variable_names(value, f"{where}: '{key}'")
    return value


def _loop(raw: dict, where: str) -> Any:
    """`loop`/`with_items`: a list, or a template that renders to one."""
    keys = [k for k in ("loop", "with_items") if k in raw]
    if len(keys) > 1:
        raise UserError(f"{where}: the task has both 'loop' and 'with_items'; keep one of them")
    if not keys:
        return None
    value = raw[keys[0]]
    if isinstance(value, list) or _is_template(value):
        return value
    raise _wrong(where, keys[0], "a list, or a template that gives one", value, '"{{ models }}"')


def _loop_var(value: Any, where: str) -> str:
    if not isinstance(value, dict):
        raise _wrong(where, "loop_control", "a mapping", value, "{loop_var: model}")
    unknown = sorted(map(str, set(value) - LOOP_CONTROL_KEYS))
    if unknown:
        raise UserError(
            f"{where}: 'loop_control' has unsupported key(s) {', '.join(unknown)}; the only one supported is "
            "loop_var (e.g. loop_control: {loop_var: model}). Remove the others."
        )
    return _identifier(value.get("loop_var", "item"), where, "loop_control.loop_var")


def _task_keywords(raw: dict, where: str) -> dict:
    """The task's keywords, checked and converted to the types of the Task fields."""
    out: dict[str, Any] = {"loop": _loop(raw, where)}
    for key in ("when",):
        if key in raw:
            out[key] = _condition_list(raw[key], where, key)
    for key in ("changed_when", "failed_when", "until"):
        if key in raw:
            out[key] = _condition(raw[key], where, key)
    for key in ("notify", "tags", "listen"):
        if key in raw:
            out[key] = _names(raw[key], where, key)
    for key in _FLAG_KEYWORDS:
        if key in raw:
            out[key] = _flag(raw[key], where, key)
    if "tags" in out:
        out["tags"] = set(out["tags"])
    if "loop_control" in raw:
        out["loop_var"] = _loop_var(raw["loop_control"], where)
    if "register" in raw:
        out["register"] = _identifier(raw["register"], where, "register")
    if "retries" in raw:
        out["retries"] = _retries(raw["retries"], where)
    if "delay" in raw:
        out["delay"] = _delay(raw["delay"], where)
    if "timeout" in raw:
        out["timeout"] = _timeout(raw["timeout"], where)
    out["vars"] = _variables(raw.get("vars"), where)
    return out


def _task_name(raw: dict, source: str) -> str | None:
    name = raw.get("name")
    if "name" in raw and not (isinstance(name, str) and name.strip()):
        raise _wrong(f"{source} (a task)", "name", "a non-empty string (quote it if it looks like a number)", name, '"Install vLLM"')
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
    if not isinstance(args, dict):
        raise UserError(f"{label}: the arguments of '{module}' must be a mapping (key: value lines), not {type(args).__name__}")
    _check_module_args(module, args, label)
    return module, args


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
    missing = [a for a, o in spec.items() if o.get("required") and a not in args]
    if missing:
        raise UserError(f"{label}: module '{module}' needs argument(s) {', '.join(missing)}")


def parse_task(raw: Any, source: str, role: str | None = None, role_dir: Path | None = None) -> Task:
    """One task, every keyword checked; `source` is "file: task N" for messages."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: a task must be a mapping with a name and one module, got {type(raw).__name__}")
    name = _task_name(raw, source)
    label = f"{source} ('{name or '?'}')"
    module, args = _task_module(raw, label)
    return Task(name=name or module, module=module, args=args, source=source, role=role, role_dir=role_dir,
                **_task_keywords(raw, label))


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


def _role_entry(entry: Any, where: str) -> tuple[str, dict, set[str], list]:
    """A play's role entry: a name, or {role: NAME, vars/params, tags, when}; returns name, params, tags, when."""
    if isinstance(entry, str) and entry.strip():
        return entry, {}, set(), []
    if not (isinstance(entry, dict) and "role" in entry):
        raise UserError(f"{where}: a role entry must be a role name or a mapping with 'role:' (e.g. - role: venv), got {_shown(entry)}")
    name = entry["role"]
    if not (isinstance(name, str) and name.strip()):
        raise _wrong(where, "role", "a role name (a string)", name, "venv")
    where = f"{where}: role '{name}'"
    params = dict(_variables(entry.get("vars"), where))
    extra = {k: v for k, v in entry.items() if k not in ("role", "vars", "tags", "when")}
    check_variable_names(extra, f"{where}: parameters")
    params.update(extra)
    tags = set(_names(entry["tags"], where, "tags")) if "tags" in entry else set()
    when = _condition_list(entry["when"], where, "when") if "when" in entry else []
    return name, params, tags, when


def _role_defaults(role_dir: Path) -> dict:
    defaults_file = _role_file(role_dir, "defaults")
    if not defaults_file:
        return {}
    defaults = load_yaml(defaults_file, "role defaults")
    if defaults is None:
        return {}
    if not isinstance(defaults, dict):
        raise UserError(f"{defaults_file}: role defaults must be a mapping of variable names to values")
    check_variable_names(defaults, str(defaults_file))
    return defaults


def load_role(entry: Any, playbook: Path, where: str, play: Play) -> None:
    name, params, role_tags, role_when = _role_entry(entry, where)
    role_dir = find_role(name, playbook, where)
    play.defaults.update(_role_defaults(role_dir))
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


def _play_hosts(raw: dict, where: str) -> str:
    """`hosts`: a pattern, or a list of names/patterns (joined with ',')."""
    if "hosts" not in raw:
        raise UserError(f"{where}: the play has no 'hosts:' (a host, group or pattern, e.g. all)")
    hosts = raw["hosts"]
    items = hosts if isinstance(hosts, list) else [hosts]
    if not items or not all(isinstance(h, str) and h.strip() for h in items):
        raise _wrong(where, "hosts", "a host, group or pattern (a string), or a list of them", hosts, "gpu")
    return ",".join(items)


def _parse_play(raw: Any, path: Path, where: str) -> Play:
    """One play: keywords checked, then its pre_tasks, roles, tasks and handlers loaded."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a play must be a mapping with 'hosts:'")
    bad = sorted(map(str, set(raw) - PLAY_KEYWORDS))
    if bad:
        raise UserError(f"{where}: unknown play keyword(s) {', '.join(bad)}; a play may have {', '.join(sorted(PLAY_KEYWORDS))}")
    hosts = _play_hosts(raw, where)
    name = raw.get("name", hosts)
    if not (isinstance(name, str) and name.strip()):
        raise _wrong(where, "name", "a non-empty string", name, '"Provision the GPU hosts"')
    play = Play(name=name, hosts=hosts, source=path, vars=_variables(raw.get("vars"), where))
    if "gather_facts" in raw:
        play.gather_facts = _flag(raw["gather_facts"], where, "gather_facts")
    play_tags = set(_names(raw["tags"], where, "tags")) if "tags" in raw else set()
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
    _check_notified_handlers(play)
    return play


def _check_notified_handlers(play: Play) -> None:
    names = {h.name for h in play.handlers} | {n for h in play.handlers for n in h.listen}
    for t in play.tasks:
        for n in t.notify:
            if n not in names:
                raise UserError(
                    f"{t.source} ('{t.name}'): notifies '{n}', but no handler has that name; handlers: {', '.join(sorted(names)) or '(none)'}"
                )


def load_playbook(path: str | Path) -> list[Play]:
    """Every play of a playbook, checked before any host is touched."""
    path = Path(path)
    data = load_yaml(path, "playbook")
    if not isinstance(data, list):
        raise UserError(f"{path}: a playbook is a list of plays, each starting with '- hosts:'")
    return [_parse_play(raw, path, f"{path}: play {i + 1}") for i, raw in enumerate(data)]
