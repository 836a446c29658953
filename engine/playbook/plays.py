"""Playbooks: plays (hosts, keywords, roles, tasks, handlers) and import_playbook; load_playbook is the entry.

A bad playbook is refused whole before any host is touched."""

from __future__ import annotations

from collections import ChainMap
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.parsing.ansible_cfg import setting
from engine.parsing.yamlfile import LoadBudget, load_yaml
from engine.playbook.context import ParseContext, enter
from engine.playbook.keywords import (
    PLAY_KEYWORDS,
    become_of,
    condition_list,
    environment_of,
    flag,
    is_template_text,
    max_fail_percentage_of,
    names,
    serial_of,
    variables_of,
    wrong,
)
from engine.playbook.model import Play
from engine.playbook.modulespec import forget_user_modules
from engine.playbook.tasks import (
    inherit_become,
    inherit_environment,
    load_role,
    load_time_name,
    parse_tasks,
    short_names,
)
from engine.playbook.user_modules import add_library
from engine.template.templar import Templar


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
    known = PLAY_KEYWORDS | PLAY_FLOW_KEYWORDS
    bad = sorted(map(str, set(raw) - known))
    if bad:
        raise UserError(f"{where}: unknown play keyword(s) {', '.join(bad)}; a play may have {', '.join(sorted(known))}")
    hosts = _play_hosts(raw, where)
    name = raw.get("name", hosts)
    if not (isinstance(name, str) and name.strip()):
        raise wrong(where, "name", "a non-empty string", name, '"Provision the GPU hosts"')
    # the vars of the import_playbook(s) that brought it in, under its own while it loads (as Ansible's; they win
    # once it is loaded: import_playbook)
    play = Play(name=name, hosts=hosts, source=path, vars={**loading.import_vars, **variables_of(raw.get("vars"), where)})
    play.keyword_templates = {k: raw[k] for k in TEMPLATED_PLAY_KEYWORDS if k in raw and is_template_text(raw[k])}
    raw = {k: v for k, v in raw.items() if k == "hosts" or k not in play.keyword_templates}  # checked once rendered
    if "gather_facts" in raw:
        play.gather_facts = flag(raw["gather_facts"], where, "gather_facts")
    elif "gather_facts" not in play.keyword_templates:  # Ansible's DEFAULT_GATHERING: explicit gathers on request only
        play.gather_facts = (setting("gathering") or "implicit").strip().lower() != "explicit"
    if "any_errors_fatal" in raw:
        play.any_errors_fatal = flag(raw["any_errors_fatal"], where, "any_errors_fatal")
    play_tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    play.tags = sorted(play_tags)
    ctx = replace(loading, play=play)
    play.tasks.extend(parse_tasks(raw.get("pre_tasks"), path, ctx))
    play.flush_after.append(len(play.tasks))  # handlers run after pre_tasks, after roles and tasks, after post_tasks
    roles = raw.get("roles") or []
    if not isinstance(roles, list):
        raise UserError(f"{where}: 'roles' must be a list of role names")
    for entry in roles:
        load_role(entry, where, ctx)
    play.tasks.extend(parse_tasks(raw.get("tasks"), path, ctx))
    play.flush_after.append(len(play.tasks))
    play.tasks.extend(parse_tasks(raw.get("post_tasks"), path, ctx))
    _flow_keywords(play, raw, where)
    play.handlers.extend(parse_tasks(raw.get("handlers"), path, loading))
    play.handlers.sort(key=lambda h: h.by_include_role)  # include_role's come last: Ansible adds them as it runs
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
    return play


# Play keywords Ansible renders before the play runs (from -e and the play's vars); become_user renders per task.
TEMPLATED_PLAY_KEYWORDS = ("hosts", "gather_facts", "any_errors_fatal", "max_fail_percentage", "become",
                           "become_method", "strategy", "order", "force_handlers")


def resolve_play_keywords(plays: list[Play], templar: Templar, extra_vars: dict) -> None:
    """Each play's templated keywords rendered before the run, from -e, the play's vars and its roles'
    defaults (no host's variables: one value for the whole play), then checked as written ones would be."""
    for play in plays:
        if not play.keyword_templates:
            continue
        where = f"{play.source}: play '{play.name}'"
        view = templar.view(ChainMap(extra_vars, play.vars, {"playbook_dir": str(play.source.parent)}, play.defaults))
        rendered = {}
        for key, text in play.keyword_templates.items():
            try:
                rendered[key] = templar.render_value(text, view)
            except Exception as exc:  # undefined, a syntax error: the file and the fix, before any host
                raise UserError(f"{where}: its '{key}' {text!r} does not render ({exc}). Play keywords are rendered "
                                "before the run from -e and the play's vars (not a host's variables); define the "
                                f"variable there or write {key} plainly.") from None
        _apply_rendered(play, rendered, f"{where} ('{{{{ }}}}' rendered)")
        play.keyword_templates = {}


def _apply_rendered(play: Play, rendered: dict, where: str) -> None:
    """The rendered keywords into the play, each checked by the load's own rule."""
    if "hosts" in rendered:
        play.hosts = _play_hosts(rendered, where)
    for key in ("gather_facts", "any_errors_fatal"):
        if key in rendered:
            setattr(play, key, flag(rendered[key], where, key))
    if "max_fail_percentage" in rendered:
        play.max_fail_percentage = max_fail_percentage_of(rendered["max_fail_percentage"], where)
    _flow_keywords(play, {k: rendered[k] for k in ("force_handlers", "strategy", "order") if k in rendered}, where)
    become = become_of(rendered, where)
    if become:
        play.become = {**play.become, **become}
        inherit_become(play.all_tasks(), become)


PLAY_FLOW_KEYWORDS = {"post_tasks", "force_handlers", "strategy", "order", "connection", "vars_files", "vars_prompt"}
STRATEGIES = ("linear", "free", "host_pinned")  # host_pinned: free, each host kept by one worker (ours: free)
HOST_ORDERS = ("inventory", "reverse_inventory", "sorted", "reverse_sorted", "shuffle")
CONNECTIONS = ("local", "ssh", "smart")  # smart: Ansible's name for ssh
PROMPT_KEYS = {"name", "prompt", "default", "private", "confirm", "unsafe"}


def _choice(raw: dict, key: str, choices: tuple, where: str) -> str:
    value = raw[key]
    if not (isinstance(value, str) and value in choices):
        raise wrong(where, key, f"one of {', '.join(choices)}", value, choices[0])
    return value


def _flow_keywords(play: Play, raw: dict, where: str) -> None:
    """The play keywords that shape how it runs: force_handlers, strategy, order, connection, vars_files,
    vars_prompt (checked here; the Runner applies them)."""
    if "force_handlers" in raw:
        play.force_handlers = flag(raw["force_handlers"], where, "force_handlers")
    if "strategy" in raw:
        play.strategy = _choice(raw, "strategy", STRATEGIES, where).replace("host_pinned", "free")
    if "order" in raw:
        play.order = _choice(raw, "order", HOST_ORDERS, where)
    if "connection" in raw:
        play.connection = "ssh" if _choice(raw, "connection", CONNECTIONS, where) == "smart" else raw["connection"]
    if raw.get("vars_files") is not None:
        play.vars_files = _vars_files_of(raw["vars_files"], where)
    if raw.get("vars_prompt") is not None:
        play.vars_prompt = _vars_prompt_of(raw["vars_prompt"], where)


def _vars_files_of(value: Any, where: str) -> list:
    """`vars_files`: a file name or a list; an entry that is itself a list names alternatives (the first found)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        names_ = item if isinstance(item, list) else [item]
        if not names_ or not all(isinstance(n, str) and n.strip() for n in names_):
            raise wrong(where, "vars_files", "a list of file names (an entry may be a list: the first that exists)",
                        item, "[vars/common.yml, [\"vars/{{ os }}.yml\", vars/default.yml]]")
    return list(items)


def _vars_prompt_of(value: Any, where: str) -> list:
    """`vars_prompt`: a list of {name, prompt, default, private, ...}; no prompt is ever shown (no terminal is
    assumed): -e answers it, else its default (engine/run/runner.py)."""
    if not isinstance(value, list):
        raise wrong(where, "vars_prompt", "a list of prompts", value, "[{name: version, default: '1.0'}]")
    out = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"].strip():
            raise wrong(where, "vars_prompt", "a list of mappings each with a 'name'", item,
                        "[{name: version, prompt: Which version?, default: '1.0'}]")
        bad = sorted(map(str, set(item) - PROMPT_KEYS))
        if bad:
            raise UserError(f"{where}: vars_prompt '{item['name']}': unsupported key(s) {', '.join(bad)} (encrypt "
                            f"and salt are not supported); a prompt may have {', '.join(sorted(PROMPT_KEYS))}")
        out.append(dict(item))
    return out


def load_playbook(path: str | Path, budget: LoadBudget | None = None, extra_vars: dict | None = None) -> list[Play]:
    """Every play of a playbook (and of the playbooks it imports, in place), checked before any host is touched;
    everything it brings in is read within one budget (engine/parsing/yamlfile.py LoadBudget; a fresh one by default).
    `extra_vars` (-e): what a templated import name may read, besides the vars written with it (and the play's)."""
    path = Path(path)
    forget_user_modules()
    return _load_playbook(path, ParseContext(path, including=((path.resolve(), str(path)),),
                                             budget=budget or LoadBudget(path), extra_vars=dict(extra_vars or {})))


def _load_playbook(path: Path, ctx: ParseContext) -> list[Play]:
    """The plays of the playbook `path`; `ctx`: the load it is part of, `path` entered in it."""
    data = load_yaml(path, "playbook", ctx.budget)
    add_library(path.parent / "library")  # its own modules, known from here on (as Ansible's module path)
    if not isinstance(data, list):
        raise UserError(f"{path}: a playbook is a list of plays, each starting with '- hosts:'")
    loading = ParseContext(path, including=ctx.including, budget=ctx.budget,  # its own roles and task files
                           extra_vars=ctx.extra_vars, import_vars=ctx.import_vars)
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
    condition go to every task. A templated name renders now, from -e and the import's vars (as Ansible's); a
    cycle or a missing file is refused at load."""
    file = raw["import_playbook"]
    bad = sorted(map(str, set(raw) - IMPORT_PLAYBOOK_KEYS))
    if bad or not (isinstance(file, str) and file.strip()):
        why = f"unknown keyword(s) {', '.join(bad)}" if bad else "the file must be a name"
        raise UserError(f"{where}: import_playbook: {why}; write `- import_playbook: FILE.yaml` with optional vars, "
                        "tags and when")
    if is_template_text(file):
        file = load_time_name(file, ctx, variables_of(raw.get("vars"), where), f"{where} (import_playbook)",
                              "import_playbook")
    target = Path(file) if Path(file).is_absolute() else path.parent / file
    if not target.is_file():
        raise UserError(f"{where}: import_playbook: '{file}' not found (looked for {target}); fix the path")
    given = variables_of(raw.get("vars"), where)
    inner = replace(enter(ctx, target, str(target), where, f"import_playbook {file}"),
                    import_vars={**ctx.import_vars, **given})
    tags = set(names(raw["tags"], where, "tags")) if "tags" in raw else set()
    when = condition_list(raw["when"], where, "when") if "when" in raw else []
    plays = _load_playbook(target, inner)
    for play in plays:
        play.vars = {**play.vars, **given}
        for task in play.all_tasks():
            task.tags |= tags
            task.when = when + task.when
    return plays
