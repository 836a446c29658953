"""Task lists: one task (its module, arguments and keywords checked), blocks, import_tasks / include_tasks,
import_role / include_role and a role's tasks and handlers: everything read inside a play's task lists.

Everything that can be wrong (an unknown keyword, module, role or argument, a missing required argument) is reported
here with the file and the task, before any host is touched."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.parsing.kv import kv_arguments, parse_kv, split_module_string
from engine.parsing.yamlfile import LoadBudget, Unsafe, check_variable_names, describe_name, load_yaml
from engine.playbook.context import ParseContext, enter
from engine.playbook.keywords import (
    BECOME_KEYWORDS,
    LOOP_KEYWORDS,
    TASK_KEYWORDS,
    become_of,
    condition_list,
    delegate_to_of,
    environment_of,
    flag,
    is_template_text,
    names,
    shown,
    task_keywords,
    variables_of,
    wrong,
)
from engine.playbook.model import Block, DynamicInclude, Include, Task, walk_tasks
from engine.playbook.modulespec import is_user_module, module_args_spec, modules
from engine.playbook.roles import (
    RoleCall,
    RoleMeta,
    find_role,
    role_entry,
    role_file,
    role_meta,
    role_part,
    role_variables,
    tasks_from,
)
from engine.playbook.user_modules import add_library, check_user_module
from engine.template.environment import environment
from engine.template.templar import Templar


def _task_name(raw: dict, source: str) -> str | None:
    name = raw.get("name")
    if "name" in raw and not (isinstance(name, str) and name.strip()):
        raise wrong(f"{source} (a task)", "name", "a non-empty string (quote it if it looks like a number)", name, '"Install vLLM"')
    return name


def _task_module(raw: dict, label: str) -> tuple[str, dict, list]:
    """The one module key of a task, its arguments checked against the module's argument table, and the
    arguments written as templates (`args: "{{ d }}"`, `debug: "{{ d }}"`: rendered to a mapping per host, lowest
    first; checked then, engine/run/task_args.py)."""
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
    templates = []
    if "args" in raw and whole_template(raw["args"]):
        templates.append(raw["args"])
    if whole_template(raw[module]) and module not in FREE_FORM and module not in RAW_PARAMS_ARGUMENT:
        templates.append(raw[module])
        args = {}
    else:
        args = module_arguments(module, raw[module], label)
    if "args" in raw and not whole_template(raw["args"]):  # `args:` beside the module's own (which win)
        if not isinstance(raw["args"], dict) or not isinstance(args, dict):
            raise UserError(f"{label}: 'args' must be a mapping of the module's arguments (args: {{chdir: /tmp}}), "
                            "or a template giving one (args: \"{{ some_dict }}\")")
        args = {**raw["args"], **args}
    if not isinstance(args, dict):
        raise UserError(f"{label}: the arguments of '{module}' must be a mapping (key: value lines), not {type(args).__name__}")
    # required arguments are checked when the task runs (engine/run/task_args.py), a failure of that host as
    # Ansible's (a task that expects it: ignore_errors, register)
    check_module_args(module, args, label, complete=False)
    return module, args, templates


def whole_template(value: Any) -> bool:
    """A string that is one template from end to end (as Ansible tells a templated `args:` from text)."""
    return is_template_text(value) and value.startswith(("{{", "{%")) and value.endswith(("}}", "%}"))


FREE_FORM = ("command", "shell", "raw")  # modules that take Ansible's one-line form: `- command: ls -l /tmp creates=/x`
# Modules whose one-line free-form words are one argument: `- include_tasks: x.yml`, `- meta: flush_handlers`.
RAW_PARAMS_ARGUMENT = {"include_tasks": "file", "import_tasks": "file", "meta": "action", "include_vars": "file"}


def module_arguments(module: str, value: Any, label: str) -> Any:
    """A module's arguments as written: a mapping, nothing, or Ansible's one-line `key=value` form (command and
    shell: the command line and the options in it; any other module: engine/parsing/kv.py)."""
    if value is None:
        return {}
    if not isinstance(value, str):
        return value
    if module in FREE_FORM:
        return free_form_args(value, label)
    args = kv_arguments(value, label, module)
    if "_raw_params" in args:
        target = RAW_PARAMS_ARGUMENT.get(module)
        raw = args.pop("_raw_params")
        if target is None or target in args:
            what = "a template" if is_template_text(value) and value.strip().startswith("{{") else f"the words {shown(raw)}"
            raise UserError(f"{label}: the one-line arguments of '{module}' hold {what}, which is no key=value "
                            f"option; write each argument as key=value (or as a mapping of key: value lines)")
        args[target] = raw
    return args


def free_form_args(text: str, label: str = "task") -> dict:
    """`- command: CMD [creates=P] [chdir=D] ...`: the command line (split on the host as Ansible splits it, never
    run through a shell by command) and its options (engine/parsing/kv.py's FREE_FORM_OPTIONS, wherever written),
    read as Ansible's parse_kv reads them: `cmd` is the other words joined back, its line breaks kept and a
    backslash line continuation dropped, as Ansible's shell result reports `cmd`."""
    try:
        options = parse_kv(text, free_form=True)
    except ValueError:
        raise UserError(f"{label}: the command line {shown(text)} has an unclosed quote or Jinja block (failed at "
                        "splitting arguments); close it, or give the command as cmd: in a mapping") from None
    if "_raw_params" in options:
        options["cmd"] = options.pop("_raw_params")
    return options


def check_module_args(module: str, args: dict, label: str, complete: bool = True) -> None:
    """The arguments against the module's table: names, unknown ones, and (when `complete`: at run time) the
    required ones. The load checks names and unknown ones (an internal `_option` left to the run); the run checks a
    templated task's, and one that leaves out a required argument (a host's failure, as Ansible's)."""
    reserved = [a for a in args if isinstance(a, str) and a.startswith("_ansible_")]
    if reserved:
        raise UserError(f"{label}: Invalid parameter specified beginning with keyword '_ansible_' for action "
                        f"'{module}': '{reserved[0]}'. The prefix '_ansible_' is reserved for internal use only; "
                        "rename that key.")
    if is_user_module(module):  # its AnsibleModule checks the arguments on the host, as Ansible's
        check_user_module(module, label)
        return
    spec = module_args_spec(module)
    if spec is None:  # set_fact: its arguments become variables (a templated key is checked once rendered)
        check_variable_names({k: v for k, v in args.items() if not is_template_text(k)}, f"{label}: '{module}'")
        return
    bad_names = [a for a in args if not isinstance(a, str)]
    if bad_names:
        raise UserError(f"{label}: argument name {describe_name(bad_names[0])} of '{module}' must be a string; fix that key")
    if module == "copy":  # `src:` on the control node is handled by the engine (see Runner._action_copy)
        spec = dict(spec, src={"type": "str"})
    unknown_args = sorted(set(args) - set(spec))
    if not complete:  # at load: an internal option (_diff_peek) fails its host when the task runs, as Ansible's
        unknown_args = [a for a in unknown_args if not a.startswith("_")]
    if unknown_args:
        raise UserError(
            f"{label}: module '{module}' has no argument(s) {', '.join(unknown_args)} (Unsupported parameters for "
            f"({module}) module: {', '.join(unknown_args)}); it accepts: {', '.join(sorted(spec))}"
        )
    missing = missing_required(module, args)
    if missing and complete:
        said = ACTION_MISSING.get((module, missing[0]), "")  # an engine action's own words, as Ansible's plugin
        raise UserError(f"{label}: {said}module '{module}' needs argument(s) {', '.join(missing)} (missing required "
                        f"arguments: {', '.join(missing)})")


ACTION_MISSING = {("copy", "dest"): "dest is required: "}


def needs_run_check(module: str, args: dict) -> bool:
    """Arguments the load let through for the run to refuse, as Ansible's module does (a required one left out,
    an internal option the module does not take)."""
    spec = module_args_spec(module) or {}
    return bool(missing_required(module, args)) or any(a.startswith("_") and a not in spec for a in args)


def missing_required(module: str, args: dict) -> list[str]:
    """The module's required arguments the task leaves out (one linked to a variable may be: preflight checks the
    variable is defined)."""
    spec = module_args_spec(module) or {}
    return [a for a, o in spec.items() if o.get("required") and a not in args and not o.get("var")]


def parse_task(raw: Any, source: str, role: str | None = None, role_dir: Path | None = None) -> Task:
    """One task, every keyword checked; `source` is "file: task N" for messages."""
    if not isinstance(raw, dict):
        raise UserError(f"{source}: a task must be a mapping with a name and one module, got {type(raw).__name__}")
    name = _task_name(raw, source)
    label = f"{source} ('{name or '?'}')"
    module, args, templates = _task_module(raw, label)
    keywords = task_keywords(raw, label)
    if module == "add_host":  # Ansible's add_host bypasses the host loop: once per batch (per item in a loop)
        keywords["run_once"] = True
    return Task(name=name or module, module=module, args=args, source=source, role=role, role_dir=role_dir,
                args_templates=templates, named=name is not None, given=set(raw) & TASK_KEYWORDS, **keywords)


BLOCK_KEYWORDS = {"block", "rescue", "always", "name", "when", "tags", "vars", "any_errors_fatal", "environment",
                  "delegate_to", *BECOME_KEYWORDS, "check_mode", "run_once", "ignore_errors", "notify"}
BLOCK_FLAGS = ("check_mode", "run_once", "ignore_errors")  # given to the block's tasks that do not set them


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
    block_keywords(block, raw, where)
    return block


def block_keywords(block: Block, raw: dict, where: str) -> None:
    """A block's keywords (or an include's `apply`) given to every task inside it."""
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    inherited = become_of(raw, where)
    if "any_errors_fatal" in raw:
        inherited["any_errors_fatal"] = flag(raw["any_errors_fatal"], where, "any_errors_fatal")
    if "delegate_to" in raw:
        inherited["delegate_to"] = delegate_to_of(raw["delegate_to"], where)
    _inherit(block.block + block.rescue + block.always, when, tags, variables_of(raw.get("vars"), where), inherited)
    _inherit_unset(walk_tasks(block.block + block.rescue + block.always), _block_values(raw, where))
    if "environment" in raw:
        inherit_environment(walk_tasks(block.block + block.rescue + block.always), environment_of(raw["environment"], where))


def _block_values(raw: dict, where: str) -> dict:
    """A block's check_mode, run_once, ignore_errors and notify, checked as a task's are."""
    values: dict = {key: flag(raw[key], where, key) for key in BLOCK_FLAGS if key in raw}
    if "notify" in raw:
        values["notify"] = names(raw["notify"], where, "notify")
    return values


def _inherit_unset(tasks: list[Task], values: dict) -> None:
    """A block's keyword applies to each task inside that does not set it (the task's own, or an inner block's,
    wins, as Ansible's)."""
    for task in tasks:
        for key, value in values.items():
            if key not in task.given:
                setattr(task, key, list(value) if key == "notify" else value)
                task.given.add(key)


def inherit_environment(tasks: list[Task], layer: dict | str) -> None:
    """An `environment` given above (block, play) applies to every task below it; the task's own keys win."""
    for task in tasks:
        task.environment = [layer, *task.environment]


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


ACTION_KEYS = ("action", "local_action")


def action_form(raw: Any, source: str) -> Any:
    """Ansible's older task form, `action: copy src=a dest=b` (or `action: {module: copy, src: a}`), and
    `local_action:` (the same, delegated to localhost), as the module key it stands for."""
    if not isinstance(raw, dict) or not any(k in raw for k in ACTION_KEYS):
        return raw
    if all(k in raw for k in ACTION_KEYS):
        raise UserError(f"{source}: the task has both 'action' and 'local_action'; keep one")
    key = next(k for k in ACTION_KEYS if k in raw)
    module, args = _action_module(raw[key], f"{source}: {key}")
    if module in raw:
        raise UserError(f"{source}: the task names '{module}' twice (as a key and in '{key}'); keep one")
    out = {k: v for k, v in raw.items() if k != key}
    out[module] = args
    if key == "local_action":
        out["delegate_to"] = "localhost"
    return out


def _action_module(value: Any, where: str) -> tuple[str, Any]:
    """(module, arguments) of an `action:` value: a line (module name, then its one-line arguments) or a mapping
    with `module:` (its one-line arguments, and `args:` as a mapping or a key=value line, beside the other keys)."""
    line = value.get("module") if isinstance(value, dict) else value
    if not (isinstance(line, str) and line.strip()):
        raise UserError(f"{where}: write the module and its arguments as one line (action: copy src=a dest=b), or a "
                        f"mapping with module: (action: {{module: copy, src: a, dest: b}}); got {shown(value)}")
    if whole_template(line.strip()):  # Ansible resolves it when the task runs (a `never`-tagged one never does)
        return "fail", {"msg": f"{where}: the module is the template {line.strip()}, which dflash-provision does not "
                               "resolve: it reads a task's module when the playbook loads; write the module's name"}
    try:
        module, rest = split_module_string(line)
    except ValueError as exc:
        raise UserError(f"{where}: {exc.args[0]}; close it") from None
    if not isinstance(value, dict):
        return module, rest or None
    args = {k: v for k, v in value.items() if k not in ("module", "args")}
    inner = value.get("args")
    if isinstance(inner, str):
        inner = kv_arguments(inner, where, module)
    if inner is not None and not isinstance(inner, dict):
        raise wrong(where, "args", "a mapping of the module's arguments or a key=value line", inner, "{chdir: /tmp}")
    args.update(inner or {})
    if rest:
        args.update(free_form_args(rest, where) if module in FREE_FORM else parse_kv(rest))
    return module, args


INCLUDE_KEYS = ("import_tasks", "include_tasks", "import_role", "include_role")


def include_kv(raw: Any, source: str) -> Any:
    """`- include_role: name=r tasks_from=t`, `- include_tasks: file=x.yml` (or `- import_tasks: x.yml`): the
    one-line form of an include's options, as a mapping."""
    if not isinstance(raw, dict):
        return raw
    key = next((k for k in raw if k in INCLUDE_KEYS and isinstance(raw[k], str)), None)
    if key is None:
        return raw
    args = kv_arguments(raw[key], f"{source}: {key}", key)
    if "_raw_params" in args:
        raw_words = args.pop("_raw_params")
        if key.endswith("_role") or "file" in args:
            raise UserError(f"{source}: {key} holds the words {shown(raw_words)}, which are no key=value option; "
                            f"write `- {key}: {'name=ROLE' if key.endswith('_role') else 'FILE.yml'}`")
        args["file"] = raw_words
    return {**raw, key: args}


def _parse_entry(raw: Any, source: str, ctx: ParseContext) -> list:
    """One entry of a task list: a task, a block, or `import_role` (the role's tasks, in place)."""
    spelled = raw
    raw = include_kv(short_names(action_form(raw, source), source), source)
    if isinstance(raw, dict) and "block" in raw:
        if ctx.play is None:  # a plain block of handlers is Ansible's implicit one; more is its parser error
            inner = raw["block"] if isinstance(raw["block"], list) else []
            if set(raw) <= {"block", "name"} and not any(isinstance(e, dict) and "block" in e for e in inner):
                return parse_tasks(inner, source, ctx)
            raise UserError(f"{source}: Using a block as a handler is not supported.")
        return [parse_block(raw, source, ctx)]
    if isinstance(raw, dict) and {"import_role", "include_role"} & set(raw):
        if ctx.play is None:
            action = next((k for k in spelled if str(k).split(".")[-1] in ("import_role", "include_role")),
                          "include_role") if isinstance(spelled, dict) else "include_role"
            raise UserError(f"{source}: Using '{action}' as a handler is not supported.")
        return spelled_include(import_role(raw, source, ctx), spelled)
    if isinstance(raw, dict) and ({"import_tasks", "include_tasks"} & set(raw)):
        action = next((str(k) for k in spelled if str(k).split(".")[-1] in ("import_tasks", "include_tasks")), None) \
            if isinstance(spelled, dict) else None
        return spelled_include(import_tasks(raw, source, ctx, action), spelled)
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
# given to the imported tasks (Ansible's include_tasks refuses delegate_to), the flags where a task sets none
IMPORT_ONLY_KEYS = {"delegate_to", "any_errors_fatal", "check_mode", "run_once", "ignore_errors"}
# what an include (not an import) may have besides, as Ansible's: a loop, register, ignore_errors, no_log
INCLUDE_ONLY_KEYS = {"register", "ignore_errors", "no_log", "loop_control", "run_once", "debugger", "args",
                     *LOOP_KEYWORDS}
MARKER_KEYS = ("when", "tags", "vars", "register", "ignore_errors", "no_log", "loop_control", "run_once",
               *LOOP_KEYWORDS)  # run_once: the include on the first host alone (engine/run/runner.py)


def _with_args(raw: dict, key: str, source: str) -> dict:
    """An include's `args:` (Ansible's: its options written beside it, `args: {apply: ...}`) merged into its
    options; the options given with the key win."""
    if "args" not in raw:
        return raw
    extra, spec = raw["args"], raw[key]
    if not isinstance(extra, dict):
        raise wrong(f"{source} ({key})", "args", "a mapping of the include's options", extra, "{apply: {tags: [x]}}")
    if isinstance(spec, str):
        spec = {"name" if key.endswith("_role") else "file": spec}
    return {k: v for k, v in raw.items() if k != "args"} | {key: {**extra, **(spec or {})}}


def _include_spec(spec: Any, key: str, source: str, include: bool) -> tuple[Any, dict]:
    """The file an import_tasks / include_tasks names and an include's `apply` (keywords for the tasks it
    brings): `- include_tasks: FILE`, or `{file: FILE, apply: {...}}`."""
    if not isinstance(spec, dict):
        return spec, {}
    extra = sorted(map(str, set(spec) - {"file", "apply"}))
    if extra or ("apply" in spec and not include):
        raise UserError(f"{source}: Invalid options for {key}: {', '.join(extra or ['apply'])}; write `- {key}: "
                        f"FILE.yml`{' (apply: only on include_tasks / include_role)' if not extra else ''}")
    apply = spec.get("apply") or {}
    if not isinstance(apply, dict):
        raise wrong(f"{source} ({key})", "apply", "a mapping of task keywords", apply, "{tags: [web]}")
    return spec.get("file"), apply


def _beside(raw: dict) -> dict:
    """become* and environment written beside an include (ansible-core refuses them there: "not a valid attribute
    for a TaskInclude") act as its `apply`, as this tool has always read them: they reach the included tasks."""
    return {k: raw[k] for k in ("environment", *BECOME_KEYWORDS) if k in raw}


def _looped(raw: dict) -> bool:
    return any(k in raw for k in LOOP_KEYWORDS)


def import_tasks(raw: dict, source: str, ctx: ParseContext, spelled: str | None = None) -> list:
    """`- import_tasks: FILE` (or include_tasks) with optional vars/when/tags/become: the file's tasks here, each
    with those keywords, as Ansible's static import does. The file is found as Ansible finds it (inside a role its
    tasks/ first: task_file_candidates). include_tasks keeps its keywords for itself (its tasks get its vars, and
    `apply`'s keywords): a plain name without a loop is read now, a templated name or a loop when reached
    (engine/run/includes.py), both giving the same run."""
    key = next(k for k in raw if k.split(".")[-1] in ("import_tasks", "include_tasks"))
    include = key.split(".")[-1] == "include_tasks"
    handler_keys = {"listen"} if ctx.play is None and include else set()
    raw = _with_args(raw, key, source) if include else raw
    file, apply = _include_spec(raw[key], key, source, include)
    own_keys = INCLUDE_ONLY_KEYS if include else IMPORT_ONLY_KEYS
    bad = sorted(map(str, set(raw) - IMPORT_KEYS - own_keys - handler_keys - {key}))
    dynamic = include and (_looped(raw) or is_template_text(file))
    if bad:
        why = f"unknown keyword(s) {', '.join(bad)}" + (" (a loop needs include_tasks)" if not include else "")
        raise UserError(f"{source}: {key}: {why}; write `- {key}: FILE.yaml` with optional vars, when, tags and become")
    if not isinstance(file, str) or not file.strip():
        raise _no_file(raw, source, spelled or key)
    if not include and is_template_text(file):  # a static import's name renders now, as Ansible's
        file = load_time_name(file, ctx, variables_of(raw.get("vars"), source), f"{source} ({key})", key)
    if ctx.play is None and apply:
        raise UserError(f"{source}: {key} in handlers is read as an import: apply is not supported there; include "
                        "the file from a task instead")
    if ctx.play is None and dynamic:
        return _when_notified(raw, key, file, source, ctx)
    where = f"{source} ({key} {file})"
    import_vars = variables_of(raw.get("vars"), where)
    if include and ctx.play is not None:  # (in handlers read as an import: they reach its tasks that way)
        apply = {**_beside(raw), **apply}
    if dynamic:
        return [include_of(raw, key, {"file": file}, source, ctx, [], apply, dynamic=True)]
    if include and ctx.play is None:  # a handler's include is read when notified in Ansible: a file that does
        try:                           # not exist fails the handler then, not the playbook now
            path = _task_file(file, source, ctx)
        except UserError as exc:
            tasks = [Task(name=raw.get("name") or key, module="fail", args={"msg": Unsafe(str(exc))}, source=source,
                          role=ctx.role, role_dir=ctx.role_dir, named="name" in raw, action=key)]
        else:
            try:
                tasks = read_task_file(path, enter(ctx, path, str(path), source, f"{key} {file}"), apply, where)
            except UserError:  # Ansible's parser error ends the run once the handler is notified: read it then
                return _when_notified(raw, key, file, source, ctx)
    else:
        try:
            path = _task_file(file, source, ctx)
            tasks = read_task_file(path, enter(ctx, path, str(path), source, f"{key} {file}"), apply, where)
        except IncludeNotFound:  # an include's file missing here or in an import inside it fails the hosts that
            if not include:      # reach it, as Ansible's dynamic include does (read again then); an import's, and
                raise            # any other load error, stops the run now
            return [include_of(raw, key, {"file": file}, source, ctx, [], apply, dynamic=True)]
    if include and ctx.play is not None:
        _inherit(tasks, [], set(), import_vars, {})  # an include's vars reach its tasks; its other keywords do not
        _name_with(walk_tasks(tasks), import_vars)
        return [include_of(raw, key, {"file": file}, source, ctx, tasks, apply)]
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    inherited = become_of(raw, where)
    if "delegate_to" in raw:  # an import's delegate_to reaches its tasks, as Ansible's
        inherited["delegate_to"] = delegate_to_of(raw["delegate_to"], where)
    if "any_errors_fatal" in raw:
        inherited["any_errors_fatal"] = flag(raw["any_errors_fatal"], where, "any_errors_fatal")
    _inherit(tasks, when, tags, import_vars, inherited)
    _inherit_unset(walk_tasks(tasks), _block_values(raw, where))  # check_mode, run_once, ignore_errors
    if "environment" in raw:
        inherit_environment(walk_tasks(tasks), environment_of(raw["environment"], where))
    _name_with(walk_tasks(tasks), import_vars)
    if ctx.play is None and include:  # a handler that includes: notifying its name (or listen) runs the include
        heard = names(raw["listen"], where, "listen") if "listen" in raw else []  # (one ok result) and its tasks
        for task in walk_tasks(tasks):
            task.listen = [*task.listen, *([raw["name"]] if raw.get("name") else []), *heard]
            task.via_include = True
        marker = Task(name=raw.get("name") or key.split(".")[-1], module="include_tasks", args={"file": file},
                      source=source, role=ctx.role, role_dir=ctx.role_dir, when=list(when), listen=list(heard),
                      named="name" in raw, action=key)
        return [marker, *tasks]
    return tasks


def _when_notified(raw: dict, key: str, file: str, source: str, ctx: ParseContext) -> list:
    """A handler's include read when notified (a loop, a templated name, a file that does not parse): the
    Runner runs the include, then what it brings (engine/run/runner.py _run_handler)."""
    brought = include_of(raw, key, {"file": file}, source, ctx, [], {}, dynamic=True)
    heard = names(raw["listen"], source, "listen") if "listen" in raw else []
    return [replace(brought.marker, brings=brought, listen=heard)]  # a copy: no marker holds itself


class TaskParserError(UserError):
    """A load error about one task, which it names (`task_at`: its source, name and module) so that the run's
    error quotes the task's lines under it (engine/report/origin.py error_origin), as ansible-core 2.19 does."""

    def __init__(self, msg: str, task_at: tuple[str, str, str]) -> None:
        super().__init__(msg)
        self.task_at = task_at


def _no_file(raw: dict, source: str, action: str) -> TaskParserError:
    """Ansible's parser error for an include or import naming no file."""
    key = action.split(".")[-1]
    return TaskParserError(f"No file specified for {action} ({source}); write `- {key}: FILE.yaml` with optional "
                           "vars, when, tags and become", (source, raw.get("name") or action, key))


def read_task_file(path: Path, ctx: ParseContext, apply: dict, where: str) -> list:
    """A task file's tasks; with an include's `apply`, inside a block holding its keywords (as Ansible's)."""
    data = load_yaml(path, "task file", ctx.budget)
    if not apply:
        return parse_tasks(data, path, ctx)
    if data is not None and not isinstance(data, list):
        raise UserError(f"{path}: tasks must be a list (each entry starting with '- name:')")
    bad = sorted(map(str, set(apply) - BLOCK_KEYWORDS)) + [k for k in ("block", "rescue", "always") if k in apply]
    if bad:
        raise UserError(f"{where}: apply may hold block keywords only ({', '.join(sorted(BLOCK_KEYWORDS - {'block', 'rescue', 'always'}))}), "
                        f"not {', '.join(bad)}")
    return [parse_block({**apply, "block": data or []}, str(path), ctx)]


def include_of(raw: dict, key: str, args: dict, source: str, ctx: ParseContext, tasks: list, apply: dict,
               dynamic: bool = False) -> Include:
    """The Include of include_tasks / include_role: its marker task (named as the playbook names it, with the
    include's when, tags, vars, loop, register, ignore_errors) and the tasks it brings, or (a templated name, a
    loop) what reading it when reached needs."""
    short = key.split(".")[-1]
    role = ctx.role
    name = raw.get("name") or short
    if short == "include_role" and "name" not in raw:  # shown as Ansible shows it: `include_role : ROLE`
        name, role = f"{short} : {args['name']}", None
    where = f"{source} ({key})"
    own = task_keywords({k: raw[k] for k in MARKER_KEYS if k in raw}, where)
    marker = Task(name=name, module=short, args=args, source=source, role=role, role_dir=ctx.role_dir,
                  named="name" in raw, action=key, given=set(raw) & TASK_KEYWORDS, **own)
    if not (dynamic or _looped(raw) or any(is_template_text(v) for v in args.values())):
        return Include(marker, tasks)
    spec = dict(raw[key]) if isinstance(raw[key], dict) else {"file": raw[key]}
    return Include(marker, [], DynamicInclude(spec, apply, ctx, own_when=len(marker.when), own_tags=set(marker.tags)))


MAX_RUN_DEPTH = 64  # includes read when reached, inside one another (a file may include itself under a `when`)


def _run_context(include: Include, path: Path, label: str) -> ParseContext:
    """Where a file an include reads when reached is read: the include's context, one file deeper, with a load
    budget of its own (each reach reads the file again)."""
    assert include.dynamic is not None  # noqa: S101 - only dynamic includes are read when reached
    ctx: ParseContext = include.dynamic.context
    chain = (*ctx.including, (path.resolve(), label))
    if len(chain) > MAX_RUN_DEPTH:
        raise UserError(f"{include.marker.source}: includes nest more than {MAX_RUN_DEPTH} deep (the last: {label}); "
                        "a file that includes itself needs a `when` that ends it")
    return replace(ctx, including=chain, budget=LoadBudget(path))


def included_tasks(include: Include, file: str, loop_names: dict, taints: dict) -> list:
    """What a dynamic include_tasks brings on a host that reached it with this file name (and loop item): the
    file read now with every check a load makes; a UserError names the file and the field."""
    assert include.dynamic is not None  # noqa: S101 - only dynamic includes are read when reached
    marker = include.marker
    where = f"{marker.source} ({marker.action or marker.module} {file})"
    path = _task_file(file, where, include.dynamic.context)
    tasks = read_task_file(path, _run_context(include, path, str(path)), include.dynamic.apply, where)
    return _brought(include, tasks, loop_names, taints)


def included_role(include: Include, args: dict, loop_names: dict, taints: dict) -> list:
    """What a dynamic include_role brings on a host that reached it with these (rendered) name and tasks_from:
    the role read now (its defaults and handlers join the play)."""
    assert include.dynamic is not None  # noqa: S101 - only dynamic includes are read when reached
    marker, spec = include.marker, include.dynamic.spec
    name = args.get("name")
    where = f"{marker.source} ({marker.action or marker.module} {name})"
    if not (isinstance(name, str) and name.strip()):
        raise UserError(f"{where}: the role name rendered to {name!r}; it must give a role's name")
    if not role_exists(name, include.dynamic.context.playbook):
        try:
            find_role(name, include.dynamic.context.playbook, where)
        except UserError as exc:
            raise IncludeNotFound(str(exc)) from None
    # tasks_from as rendered for this host (one rendering to omit is left out: the role's main tasks)
    from_files = {part: spec[k] for k, part in FROM_OPTIONS.items() if k in spec and k != "tasks_from"}
    if args.get("tasks_from") is not None:
        from_files["tasks"] = args["tasks_from"]
    flags = {k: flag(spec[k], where, f"include_role.{k}") for k in ("public", "allow_duplicates") if k in spec}
    call = RoleCall(name, dict(marker.vars), set(), [], {}, from_files, static=False, public=flags.get("public"),
                    allow_duplicates=flags.get("allow_duplicates", True))
    ctx = replace(include.dynamic.context, budget=LoadBudget(include.dynamic.context.playbook))
    tasks = role_tasks(call, where, ctx, "include_role")
    if include.dynamic.apply:
        tasks = [_applied(tasks, include.dynamic.apply, where)]
    return _brought(include, tasks, loop_names, taints)


def _applied(tasks: list, apply: dict, where: str) -> Block:
    """A role's tasks inside a block holding an include_role's `apply` keywords."""
    bad = sorted(map(str, set(apply) - BLOCK_KEYWORDS)) + [k for k in ("block", "rescue", "always") if k in apply]
    if bad:
        raise UserError(f"{where}: apply may hold block keywords only, not {', '.join(bad)}")
    block = Block(name=str(apply.get("name") or "block"), source=where, block=tasks)
    block_keywords(block, apply, where)
    return block


def _brought(include: Include, tasks: list, loop_names: dict, taints: dict) -> list:
    """The tasks a dynamic include brought, given what the blocks, role and play around the include gave it
    (not the include's own keywords, as Ansible's), its vars and the item of its loop."""
    assert include.dynamic is not None  # noqa: S101 - only dynamic includes are read when reached
    marker, own = include.marker, include.dynamic
    when = marker.when[:len(marker.when) - own.own_when]
    tags = marker.tags - own.own_tags
    become = {k: getattr(marker, k) for k in (*BECOME_KEYWORDS, "any_errors_fatal") if getattr(marker, k) is not None}
    _inherit(tasks, when, tags, marker.vars, become)
    for task in walk_tasks(tasks):
        task.environment = [*marker.environment, *task.environment]
        task.role_vars = {**marker.role_vars, **task.role_vars}
        task.role_defaults = {**marker.role_defaults, **task.role_defaults}
        task.include_names = {**marker.include_names, **loop_names, **task.include_names}
        task.include_taints = {**marker.include_taints, **taints, **task.include_taints}
    _name_with(walk_tasks(tasks), {**marker.vars, **loop_names})
    return tasks


def _name_with(tasks, import_vars: dict) -> None:
    """Task names of an imported file that use the import's vars, rendered with them when the file is read (as
    Ansible shows them), so one file imported twice reads as two steps. A name needing anything else stays
    as written."""
    if not import_vars:
        return
    templar = Templar(environment())
    for task in tasks:
        if "{{" in task.name:
            try:
                task.name = str(templar.render_value(task.name, templar.view(dict(import_vars))))
            except Exception:  # noqa: S112 - a name with other variables is shown as written, like Ansible's
                continue


class IncludeNotFound(UserError):
    """The file or role an include names is not there (when reached: that host's failure, as Ansible's; any other
    error in what it brings stops the run, as Ansible's parser errors do)."""


def _task_file(file: str, source: str, ctx: ParseContext) -> Path:
    """An imported or included task file, found as Ansible finds it (see task_file_candidates)."""
    candidates = task_file_candidates(file, ctx)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    looked = ", ".join(dict.fromkeys(map(str, candidates)))
    raise IncludeNotFound(f"{source}: Could not find or access the task file '{file}' on the control node; create it "
                          f"or correct the name.\nCould not find or access it at any of: {looked}")


def task_file_candidates(file: str, ctx: ParseContext) -> list[Path]:
    """Where a task file named in an import or include is looked for, first found wins. Inside a role, as Ansible:
    the role's tasks/ (handlers/ for its handlers), tasks/, then beside the file that names it, the role's own
    folder, the playbook's folder; outside a role: beside the file that names it, then the playbook's folder
    (and its tasks/, as before)."""
    path = Path(file).expanduser()
    if path.is_absolute():
        return [path]
    here = ctx.including[-1][0].parent if ctx.including else ctx.playbook.parent
    folders: list[Path] = []
    if ctx.role_dir is not None:
        subdir = "tasks" if ctx.play is not None else "handlers"
        folders += [ctx.role_dir / subdir, ctx.role_dir / "tasks", here, ctx.role_dir]
    else:
        folders.append(here)
    folders += [ctx.playbook.parent, ctx.playbook.parent / "tasks"]
    return [folder / file for folder in folders]


ROLE_INCLUDE_OPTIONS = ("name", "role", "tasks_from", "vars_from", "defaults_from", "handlers_from", "public",
                        "allow_duplicates", "rolespec_validate")
FROM_OPTIONS = {"tasks_from": "tasks", "vars_from": "vars", "defaults_from": "defaults", "handlers_from": "handlers"}


def import_role(raw: dict, source: str, ctx: ParseContext) -> list:
    """`- import_role: {name: ROLE, tasks_from: FILE, ...}` with optional vars/when/tags/become: the role's tasks
    (its dependencies' first) here, its defaults and handlers added to the play, as Ansible's static import does.
    include_role keeps its keywords for itself (its tasks get its vars and `apply`'s keywords); a plain name
    without a loop is read now, a templated name or tasks_from, or a loop, when reached (engine/run/includes.py).
    Options: tasks_from, vars_from, defaults_from, handlers_from, public, allow_duplicates (true unless said),
    rolespec_validate (accepted; argument specs are not checked), apply (include_role)."""
    key = "import_role" if "import_role" in raw else "include_role"
    include = key == "include_role"
    raw = _with_args(raw, key, source) if include else raw
    raw = {**raw, key: _rendered_flags(raw, key, source, ctx)}
    spec = raw[key]
    bad = sorted(map(str, set(raw) - {key, "name", "vars", "when", "tags", "environment", *BECOME_KEYWORDS}
                     - (INCLUDE_ONLY_KEYS if include else IMPORT_ONLY_KEYS)))
    options = (*ROLE_INCLUDE_OPTIONS, "apply") if include else ROLE_INCLUDE_OPTIONS
    bad += sorted(f"{key}.{k}" for k in (spec if isinstance(spec, dict) else {}) if k not in options)
    name = spec.get("name", spec.get("role")) if isinstance(spec, dict) else None
    templated = [k for k in ("vars_from", "defaults_from", "handlers_from")
                 if isinstance(spec, dict) and is_template_text(spec.get(k))]
    for option in ("name", "tasks_from") if not include and isinstance(spec, dict) else ():  # render now (Ansible)
        if is_template_text(spec.get(option)):
            spec = {**spec, option: load_time_name(spec[option], ctx, variables_of(raw.get("vars"), source),
                                                   f"{source} ({key})", option)}
            name = spec.get("name", spec.get("role"))
    if bad or templated or not (isinstance(name, str) and name.strip()):
        raise UserError(f"{source}: write {key} as `- {key}: {{name: ROLE}}` (a role name, optionally with {', '.join(ROLE_INCLUDE_OPTIONS[2:])}) and "
                        f"vars, when, tags and become beside it{'; not supported: ' + ', '.join(bad + templated) if bad or templated else ''}")
    assert ctx.play is not None  # noqa: S101 - _parse_entry checked it
    where = f"{source} ({key} {name})"
    apply = spec.get("apply") or {} if include else {}
    if not isinstance(apply, dict):
        raise wrong(where, "apply", "a mapping of task keywords", apply, "{tags: [web]}")
    apply = {**_beside(raw), **apply} if include else apply
    if include:
        args = {k: spec[k] for k in ("name", "tasks_from") if k in spec} if "name" in spec else {"name": name}
        if _looped(raw) or any(is_template_text(v) for v in args.values()) or (
                "when" in raw and not role_exists(name, ctx.playbook)) or (  # missing, behind a `when`: read when reached
                spec.get("public") not in (None, False)):  # public: its variables seen once it ran, as Ansible's
            return [include_of(raw, key, args, source, ctx, [], apply, dynamic=True)]
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    flags = {k: flag(spec[k], where, f"{key}.{k}") for k in ("public", "allow_duplicates", "rolespec_validate")
             if k in spec}
    call = RoleCall(name, dict(variables_of(raw.get("vars"), where)), set() if include else tags,
                    [] if include else when, {} if include else _import_inherited(raw, where),
                    {part: spec[k] for k, part in FROM_OPTIONS.items() if k in spec},
                    static=not include, public=flags.get("public"), allow_duplicates=flags.get("allow_duplicates", True))
    tasks = role_tasks(call, where, ctx, key)
    if include:
        tasks = [_applied(tasks, apply, where)] if apply else tasks
        return [include_of(raw, key, args, source, ctx, tasks, apply)]
    if "environment" in raw:
        inherit_environment(walk_tasks(tasks), environment_of(raw["environment"], source))
    _inherit_unset(walk_tasks(tasks), _block_values(raw, where))  # check_mode, run_once, ignore_errors
    return tasks


ROLE_FLAGS = ("public", "allow_duplicates", "rolespec_validate")


def _rendered_flags(raw: dict, key: str, source: str, ctx: ParseContext) -> Any:
    """import_role's / include_role's options with its templated flags (`public: "{{ x | bool }}"`) rendered when
    the playbook loads, from -e, the vars written with it and the play's vars."""
    spec = raw[key]
    if not isinstance(spec, dict):
        return spec
    own_vars = variables_of(raw.get("vars"), source)
    return {k: load_time_value(v, ctx, own_vars, f"{source} ({key})", k) if k in ROLE_FLAGS and is_template_text(v)
            else v for k, v in spec.items()}


def _import_inherited(raw: dict, where: str) -> dict:
    """What an import_role gives each of the role's tasks and handlers that does not set it: become and
    delegate_to, as Ansible's."""
    inherited = become_of(raw, where)
    if "delegate_to" in raw:
        inherited["delegate_to"] = delegate_to_of(raw["delegate_to"], where)
    if "any_errors_fatal" in raw:
        inherited["any_errors_fatal"] = flag(raw["any_errors_fatal"], where, "any_errors_fatal")
    return inherited


def role_tasks(call: RoleCall, where: str, ctx: ParseContext, key: str = "roles:") -> list:
    """A role's tasks, its dependencies' (meta/main.yml, each run once per play unless its parameters differ or
    it allows duplicates) first, for the play's `roles`, a dependency or an import_role / include_role (`key`, at
    `where`, read in `ctx`); its defaults and handlers added to the play. A role used again with the same
    parameters brings no tasks, as Ansible skips it, unless it (or the import) allows duplicates."""
    play = ctx.play
    assert play is not None  # noqa: S101 - a role is read for a play, never in handlers
    role_dir = find_role(call.name, ctx.playbook, where)
    add_library(role_dir / "library")  # the role's own modules, known from here on (as Ansible's module path)
    meta = role_meta(role_dir, ctx.budget)
    allow = meta.allow_duplicates if call.allow_duplicates is None else call.allow_duplicates
    identity = (id(play), call.identity(role_dir))
    if not allow and identity in ctx.roles_run:
        return []
    tasks = _dependency_tasks(call, meta, where, ctx, key)
    defaults = role_variables(role_dir, ctx.budget, "defaults", call.from_files.get("defaults"))
    role_vars = role_variables(role_dir, ctx.budget, "vars", call.from_files.get("vars"))
    if call.static if call.public is None else call.public:  # Ansible's public role: seen by the whole play
        play.defaults.update(defaults)
        play.vars = {**play.vars, **role_vars}
    params = {**role_vars, **call.params}  # Ansible's role vars, below its parameters
    tasks += _own_tasks(call, role_dir, where, ctx, key)
    handlers = _role_handlers(call, role_dir, where, ctx, key)
    for t in walk_tasks(tasks) + handlers:
        t.tags |= call.tags | {call.name}
        for keyword, value in call.become.items():
            if getattr(t, keyword) is None:
                setattr(t, keyword, value)
        t.when = call.when + t.when
        t.role_vars = {**params, **t.role_vars}  # an imported role's (or a dependency's) own parameters win
        t.role_defaults = {**defaults, **t.role_defaults}
    for h in handlers if not call.static else []:  # engine/run/handlers.py: found once the include_role ran
        h.by_include_role = True
    known = {(h.role, h.name) for h in play.handlers}  # a role imported twice brings its handlers once, as Ansible
    play.handlers.extend(h for h in handlers if (h.role, h.name) not in known)
    play.roles.append(call.name)
    ctx.roles_run.add(identity)
    return tasks


def _dependency_tasks(call: RoleCall, meta: RoleMeta, where: str, ctx: ParseContext, key: str) -> list:
    """The tasks of the roles in a role's meta/main.yml `dependencies`, in order, each with its own dependencies
    first; a role depending on itself, directly or through others, is refused as a cycle."""
    if not meta.dependencies or meta.path is None:
        return []
    reading = enter(ctx, meta.path, f"role {call.name} (meta)", where, f"{key} {call.name}")
    tasks: list = []
    for i, dep in enumerate(meta.dependencies):
        at = f"{meta.path}: dependency {i + 1}"
        tasks += role_tasks(role_entry(dep, at), at, reading, "dependencies")
    return tasks


def _own_tasks(call: RoleCall, role_dir: Path, where: str, ctx: ParseContext, key: str) -> list:
    """The role's tasks file (tasks/main.yml, or tasks_from's), read as the role's."""
    stem = call.from_files.get("tasks")
    tasks_file = tasks_from(stem, role_dir, where) if stem is not None else role_file(role_dir, "tasks")
    if not tasks_file:
        return []
    label = f"role {call.name}" + (f" (tasks_from {stem})" if stem is not None else "")
    reading = enter(replace(ctx, role=call.name, role_dir=role_dir), tasks_file, label, where, f"{key} {call.name}")
    return parse_tasks(load_yaml(tasks_file, "role tasks", ctx.budget), tasks_file, reading)


def _role_handlers(call: RoleCall, role_dir: Path, where: str, ctx: ParseContext, key: str) -> list[Task]:
    """The role's handlers (handlers/main.yml, or handlers_from's); their listen topics also as `ROLE : TOPIC`
    (`ROLE : NAME` is engine/run/handlers.py's)."""
    stem = call.from_files.get("handlers")
    found = role_part(role_dir, "handlers", stem) if stem is not None else role_file(role_dir, "handlers")
    if not found:
        return []
    inside = replace(ctx, play=None, role=call.name, role_dir=role_dir)
    reading = enter(inside, found, f"role {call.name} (handlers)", where, f"{key} {call.name}")
    handlers = parse_tasks(load_yaml(found, "role handlers", ctx.budget), found, reading)
    roles = dict.fromkeys([call.name, role_dir.name if call.name.endswith("." + role_dir.name) else call.name])
    for handler in handlers:  # a collection's role answers to its full name and its short one, as in Ansible
        handler.listen = [*handler.listen, *(f"{r} : {topic}" for topic in handler.listen for r in roles)]
    return handlers


def load_role(entry: Any, where: str, ctx: ParseContext) -> None:
    """One entry of a play's `roles`: the role's tasks (its dependencies' first) appended to the play's."""
    assert ctx.play is not None  # noqa: S101 - a play's roles are read for that play
    ctx.play.tasks.extend(role_tasks(role_entry(entry, where), where, ctx))


def role_exists(name: str, playbook: Path) -> bool:
    """Whether a role of that name is found now (an include_role of one that is not is read when reached, as
    Ansible's: its `when` may keep it from running)."""
    try:
        find_role(name, playbook, "")
    except UserError:
        return False
    return True


def load_time_value(text: str, ctx: ParseContext, own_vars: dict, where: str, field: str) -> Any:
    """A templated import option rendered when the playbook loads (load_time_name), whatever it gives."""
    from collections import ChainMap

    templar = Templar(environment())
    layers = ChainMap(ctx.extra_vars, own_vars, ctx.play.vars if ctx.play is not None else {},
                      {"playbook_dir": str(ctx.playbook.parent)})
    try:
        return templar.render_value(text, templar.view(layers))
    except Exception as exc:  # undefined, a syntax error
        raise UserError(f"{where}: {field} {text!r} does not render when the playbook loads ({exc}); a static "
                        "import's name may read -e, the vars written with it and the play's vars (use include_tasks "
                        "/ include_role to read a host's variables)") from None


def load_time_name(text: str, ctx: ParseContext, own_vars: dict, where: str, field: str) -> str:
    """A static import's templated name (import_playbook, import_tasks, import_role's tasks_from), rendered when
    the playbook loads, as Ansible's: from -e, the vars written with it and the play's vars (no host's: none is
    known yet). One that does not render is refused naming the field."""
    value = load_time_value(text, ctx, own_vars, where, field)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: {field} {text!r} rendered to {value!r}, not a file name")
    return value
