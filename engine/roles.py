"""Roles: where they are found, their defaults, and how their tasks and handlers join a play."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import UserError
from engine.keywords import BECOME_KEYWORDS, become_of, condition_list, names, shown, variables_of, wrong
from engine.modulespec import PROJECT_ROOT
from engine.yamlfile import check_variable_names, load_yaml

if TYPE_CHECKING:
    from engine.playbook import Play

def role_search_dirs(playbook: Path) -> list[Path]:
    dirs = [playbook.parent / "roles", playbook.parent.parent / "roles", PROJECT_ROOT / "roles"]
    out: list[Path] = []
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
    """A role's file: ours (`tasks.yaml`) or Ansible's layout (`tasks/main.yml`), .yaml or .yml."""
    for candidate in (role_dir / stem, role_dir / stem / "main"):
        for suffix in (".yaml", ".yml"):
            p = candidate.with_name(candidate.name + suffix)
            if p.is_file():
                return p
    return None


def _role_entry(entry: Any, where: str) -> tuple[str, dict, set[str], list]:
    """A play's role entry: a name, or {role: NAME, vars/params, tags, when}; returns name, params, tags, when."""
    if isinstance(entry, str) and entry.strip():
        return entry, {}, set(), []
    if not (isinstance(entry, dict) and "role" in entry):
        raise UserError(f"{where}: a role entry must be a role name or a mapping with 'role:' (e.g. - role: venv), got {shown(entry)}")
    name = entry["role"]
    if not (isinstance(name, str) and name.strip()):
        raise wrong(where, "role", "a role name (a string)", name, "venv")
    where = f"{where}: role '{name}'"
    params = dict(variables_of(entry.get("vars"), where))
    extra = {k: v for k, v in entry.items() if k not in ("role", "vars", "tags", "when", "tasks_from", *BECOME_KEYWORDS)}
    check_variable_names(extra, f"{where}: parameters")
    params.update(extra)
    tags = set(names(entry["tags"], where, "tags")) if "tags" in entry else set()
    when = condition_list(entry["when"], where, "when") if "when" in entry else []
    return name, params, tags, when


def _role_variables(role_dir: Path, stem: str = "defaults") -> dict:
    """The role's defaults (or, with stem "vars", Ansible's role vars/main.yml): a mapping of variables."""
    found = _role_file(role_dir, stem)
    if not found:
        return {}
    values = load_yaml(found, f"role {stem}")
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UserError(f"{found}: role {stem} must be a mapping of variable names to values")
    check_variable_names(values, str(found))
    return values


def _tasks_from(entry: dict, role_dir: Path, where: str) -> Path:
    """import_role's tasks_from: a task file of the role (FILE, FILE.yaml or FILE.yml, in the role's folder or its
    tasks/), as Ansible finds it; a name that is not a plain file name, or no such file, is refused at load."""
    stem = entry["tasks_from"]
    if not (isinstance(stem, str) and stem.strip()) or "/" in stem or stem.startswith(".") or "{{" in stem:
        raise wrong(where, "tasks_from", "the name of a task file of the role", stem, "variables")
    for folder in (role_dir, role_dir / "tasks"):
        if (folder / stem).is_file() and stem.endswith((".yaml", ".yml")):
            return folder / stem
        found = _role_file(folder, stem)
        if found:
            return found
    raise UserError(f"{where}: tasks_from: role '{role_dir.name}' has no task file '{stem}' (looked for {stem}.yaml "
                    f"in {role_dir} and {role_dir / 'tasks'}); fix tasks_from")


def role_tasks(entry: Any, playbook: Path, where: str, play: Play) -> list:
    """A role's tasks (for the play or an import_role), its defaults and handlers added to the play."""
    from engine.playbook import ParseContext, parse_tasks, walk_tasks  # the playbook parser reads role files too

    name, params, role_tags, role_when = _role_entry(entry, where)
    role_dir = find_role(name, playbook, where)
    play.defaults.update(_role_variables(role_dir))
    params = {**_role_variables(role_dir, "vars"), **params}  # Ansible's role vars, below the role's parameters
    ctx = ParseContext(playbook, play, name, role_dir)
    tasks_file = _tasks_from(entry, role_dir, where) if isinstance(entry, dict) and "tasks_from" in entry else \
        _role_file(role_dir, "tasks")
    tasks = parse_tasks(load_yaml(tasks_file, "role tasks"), tasks_file, ctx) if tasks_file else []
    handlers_file = _role_file(role_dir, "handlers")
    handlers = parse_tasks(load_yaml(handlers_file, "role handlers"), handlers_file,
                           ParseContext(playbook, None, name, role_dir)) if handlers_file else []
    become = become_of(entry, where) if isinstance(entry, dict) else {}
    for t in walk_tasks(tasks) + handlers:
        t.tags |= role_tags | {name}
        for key, value in become.items():
            if getattr(t, key) is None:
                setattr(t, key, value)
        t.when = role_when + t.when
        t.role_vars = {**params, **t.role_vars}  # an imported role's own parameters win
    known = {(h.role, h.name) for h in play.handlers}  # a role imported twice brings its handlers once, as Ansible
    play.handlers.extend(h for h in handlers if (h.role, h.name) not in known)
    play.roles.append(name)
    return tasks


def load_role(entry: Any, playbook: Path, where: str, play: Play) -> None:
    play.tasks.extend(role_tasks(entry, playbook, where, play))
