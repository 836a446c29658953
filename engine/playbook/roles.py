"""Roles: where they are found, their defaults, and how their tasks and handlers join a play."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.parsing.ansible_cfg import roles_path, setting
from engine.parsing.yamlfile import LoadBudget, check_variable_names, load_yaml
from engine.playbook.keywords import BECOME_KEYWORDS, become_of, condition_list, flag, names, shown, variables_of, wrong
from engine.playbook.modulespec import PROJECT_ROOT

ANSIBLE_DEFAULT_ROLES_PATH = ("~/.ansible/roles", "/usr/share/ansible/roles", "/etc/ansible/roles")


def role_search_dirs(playbook: Path) -> list[Path]:
    """Where a role name is looked up, in Ansible's order: roles/ beside the playbook (and this project's
    roles/), roles_path (ANSIBLE_ROLES_PATH or ansible.cfg, else Ansible's default folders), then the playbook's
    own folder."""
    configured = roles_path() or [Path(p).expanduser() for p in ANSIBLE_DEFAULT_ROLES_PATH]
    dirs = [playbook.parent / "roles", playbook.parent.parent / "roles", PROJECT_ROOT / "roles", *configured,
            playbook.parent]
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [o.resolve() for o in out]:
            out.append(d)
    return out


ANSIBLE_DEFAULT_COLLECTIONS_PATH = ("~/.ansible/collections", "/usr/share/ansible/collections")


def collection_role(name: str, playbook: Path) -> Path | None:
    """A collection's role by its full name `NAMESPACE.COLLECTION.ROLE`, looked up as Ansible does: the
    collections/ folder beside the playbook, then ANSIBLE_COLLECTIONS_PATH (or ansible.cfg's collections_path, else
    Ansible's default folders), each holding ansible_collections/NAMESPACE/COLLECTION/roles/ROLE."""
    parts = name.split(".")
    if len(parts) != 3 or not all(p.isidentifier() for p in parts):
        return None
    configured = [p for p in (setting("collections_path") or "").split(os.pathsep) if p.strip()]
    for base in [playbook.parent / "collections", *map(Path, configured or ANSIBLE_DEFAULT_COLLECTIONS_PATH)]:
        base = base.expanduser()
        root = base if base.name == "ansible_collections" else base / "ansible_collections"
        if (root / parts[0] / parts[1] / "roles" / parts[2]).is_dir():
            return root / parts[0] / parts[1] / "roles" / parts[2]
    return None


def find_role(name: str, playbook: Path, where: str) -> Path:
    """A role's folder by name, or by a path (absolute, or relative to the playbook's folder) as Ansible allows,
    or a collection's role by its full name."""
    in_collection = collection_role(name, playbook)
    if in_collection is not None:
        return in_collection
    for d in role_search_dirs(playbook):
        if (d / name).is_dir():
            return d / name
    given = Path(name).expanduser()
    if "/" in name and given.is_dir():
        return given
    available = sorted({p.name for d in role_search_dirs(playbook)[:3] for p in d.iterdir() if p.is_dir()})
    raise UserError(f"{where}: unknown role '{name}'; available roles: {', '.join(available) or '(none)'}")


def role_file(role_dir: Path, stem: str) -> Path | None:
    """A role's file: ours (`tasks.yaml`) or Ansible's layout (`tasks/main.yml`), .yaml or .yml."""
    for candidate in (role_dir / stem, role_dir / stem / "main"):
        for suffix in (".yaml", ".yml"):
            p = candidate.with_name(candidate.name + suffix)
            if p.is_file():
                return p
    return None


@dataclass
class RoleCall:
    """One use of a role: a `roles:` entry, a dependency in a role's meta/main.yml, or an import_role /
    include_role. `from_files` names the tasks/vars/defaults/handlers file read instead of main; `static` is false
    for include_role; `allow_duplicates` None lets the role's meta decide (roles: and dependencies)."""

    name: str
    params: dict = field(default_factory=dict)
    tags: set = field(default_factory=set)
    when: list = field(default_factory=list)
    become: dict = field(default_factory=dict)
    from_files: dict = field(default_factory=dict)
    static: bool = True
    public: bool | None = None
    allow_duplicates: bool | None = None

    def identity(self, role_dir: Path) -> str:
        """What makes two uses of a role the same use (Ansible runs such a role once per play): its folder, its
        parameters, when, tags and files."""
        return json.dumps([str(role_dir.resolve()), self.params, self.when, sorted(self.tags), self.from_files],
                          sort_keys=True, default=repr)


ROLE_ENTRY_KEYS = ("role", "name", "vars", "tags", "when", "tasks_from", *BECOME_KEYWORDS)


def role_entry(entry: Any, where: str) -> RoleCall:
    """A play's role entry or a role's dependency: a name, or {role (or name): NAME, vars, tags, when, become and
    parameters}."""
    if isinstance(entry, str) and entry.strip():
        return RoleCall(entry)
    name = entry.get("role", entry.get("name")) if isinstance(entry, dict) else None
    if name is None:
        raise UserError(f"{where}: a role entry must be a role name or a mapping with 'role:' (e.g. - role: venv), got {shown(entry)}")
    if not (isinstance(name, str) and name.strip()):
        raise wrong(where, "role", "a role name (a string)", name, "venv")
    where = f"{where}: role '{name}'"
    params = dict(variables_of(entry.get("vars"), where))
    extra = {k: v for k, v in entry.items() if k not in ROLE_ENTRY_KEYS}
    check_variable_names(extra, f"{where}: parameters")
    params.update(extra)
    tags = set(names(entry["tags"], where, "tags")) if "tags" in entry else set()
    when = condition_list(entry["when"], where, "when") if "when" in entry else []
    from_files = {"tasks": entry["tasks_from"]} if "tasks_from" in entry else {}
    return RoleCall(name, params, tags, when, become_of(entry, where), from_files)


@dataclass
class RoleMeta:
    """A role's meta/main.yml as far as a run needs it: the roles it depends on (run before it) and whether it
    may run more than once in a play with the same parameters."""

    dependencies: list = field(default_factory=list)
    allow_duplicates: bool = False
    path: Path | None = None


def role_meta(role_dir: Path, budget: LoadBudget) -> RoleMeta:
    """meta/main.yml's `dependencies` and `allow_duplicates` (its other keys, galaxy_info and the like, are for
    other tools)."""
    found = role_file(role_dir, "meta")
    data = load_yaml(found, "role meta", budget) if found else None
    if data is None:
        return RoleMeta(path=found)
    if not isinstance(data, dict):
        raise UserError(f"{found}: a role's meta must be a mapping (dependencies: [...], allow_duplicates: ...)")
    deps = data.get("dependencies") or []
    if not isinstance(deps, list):
        raise wrong(str(found), "dependencies", "a list of roles (names or mappings with role:)", deps, "[common]")
    allow = flag(data["allow_duplicates"], str(found), "allow_duplicates") if "allow_duplicates" in data else False
    return RoleMeta(deps, allow, found)


def role_variables(role_dir: Path, budget: LoadBudget, stem: str = "defaults", from_file: str | None = None) -> dict:
    """The role's defaults (or, with stem "vars", Ansible's role vars/main.yml): a mapping of variables; with
    `from_file` (vars_from, defaults_from) that file of the role's folder instead of main."""
    found = role_file(role_dir, stem) if from_file is None else role_part(role_dir, stem, from_file)
    if not found:
        return {}
    values = load_yaml(found, f"role {stem}", budget)
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise UserError(f"{found}: role {stem} must be a mapping of variable names to values")
    check_variable_names(values, str(found))
    return values


def role_part(role_dir: Path, folder: str, stem: str) -> Path:
    """vars_from / defaults_from / handlers_from: FILE, FILE.yml or FILE.yaml of the role's folder of that name; a
    path out of the role or a missing file is refused at load."""
    key = f"{folder}_from" if folder != "defaults" else "defaults_from"
    where = f"role '{role_dir.name}'"
    if not isinstance(stem, str):  # ansible-core's words
        raise UserError(f"{where}: Expected a string for {key} but got {type(stem).__name__} instead; write the name "
                        f"of one file of the role's {folder}/ folder ({key}: main.yml)")
    if not stem.strip() or stem.startswith(("/", "..")) or "{{" in stem:
        raise wrong(where, key, f"the name of a file in the role's {folder}/ folder", stem, "main.yml")
    for name in (stem, f"{stem}.yml", f"{stem}.yaml"):
        if (role_dir / folder / name).is_file():
            return role_dir / folder / name
    raise UserError(f"{where}: {key}: the role has no file '{stem}' in {role_dir / folder}; fix {key}")


def tasks_from(stem: Any, role_dir: Path, where: str) -> Path:
    """import_role's tasks_from: a task file of the role (FILE, FILE.yaml or FILE.yml, in the role's folder or its
    tasks/), as Ansible finds it; a name that is not a plain file name, or no such file, is refused at load."""
    if not (isinstance(stem, str) and stem.strip()) or stem.startswith(("/", "..")) or "{{" in stem:
        raise wrong(where, "tasks_from", "the name of a task file of the role", stem, "variables")
    for folder in (role_dir / "tasks", role_dir):
        if (folder / stem).is_file() and stem.endswith((".yaml", ".yml")):
            return folder / stem
        found = role_file(folder, stem)
        if found:
            return found
    raise UserError(f"{where}: tasks_from: role '{role_dir.name}' has no task file '{stem}' (looked for {stem}.yaml "
                    f"in {role_dir / 'tasks'} and {role_dir}); fix tasks_from")
