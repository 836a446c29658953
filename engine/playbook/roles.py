"""Roles: where they are found, their defaults, and how their tasks and handlers join a play."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.parsing.yamlfile import LoadBudget, check_variable_names, load_yaml
from engine.playbook.keywords import BECOME_KEYWORDS, condition_list, names, shown, variables_of, wrong
from engine.playbook.modulespec import PROJECT_ROOT


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


def role_file(role_dir: Path, stem: str) -> Path | None:
    """A role's file: ours (`tasks.yaml`) or Ansible's layout (`tasks/main.yml`), .yaml or .yml."""
    for candidate in (role_dir / stem, role_dir / stem / "main"):
        for suffix in (".yaml", ".yml"):
            p = candidate.with_name(candidate.name + suffix)
            if p.is_file():
                return p
    return None


def role_entry(entry: Any, where: str) -> tuple[str, dict, set[str], list]:
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


def role_variables(role_dir: Path, budget: LoadBudget, stem: str = "defaults") -> dict:
    """The role's defaults (or, with stem "vars", Ansible's role vars/main.yml): a mapping of variables."""
    found = role_file(role_dir, stem)
    if not found:
        return {}
    values = load_yaml(found, f"role {stem}", budget)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UserError(f"{found}: role {stem} must be a mapping of variable names to values")
    check_variable_names(values, str(found))
    return values


def tasks_from(entry: dict, role_dir: Path, where: str) -> Path:
    """import_role's tasks_from: a task file of the role (FILE, FILE.yaml or FILE.yml, in the role's folder or its
    tasks/), as Ansible finds it; a name that is not a plain file name, or no such file, is refused at load."""
    stem = entry["tasks_from"]
    if not (isinstance(stem, str) and stem.strip()) or "/" in stem or stem.startswith(".") or "{{" in stem:
        raise wrong(where, "tasks_from", "the name of a task file of the role", stem, "variables")
    for folder in (role_dir, role_dir / "tasks"):
        if (folder / stem).is_file() and stem.endswith((".yaml", ".yml")):
            return folder / stem
        found = role_file(folder, stem)
        if found:
            return found
    raise UserError(f"{where}: tasks_from: role '{role_dir.name}' has no task file '{stem}' (looked for {stem}.yaml "
                    f"in {role_dir} and {role_dir / 'tasks'}); fix tasks_from")
