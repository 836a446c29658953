"""Variables from files on the control node: a play's `vars_files` and the `include_vars` action.

Both read YAML (or JSON) mappings beside the playbook (include_vars: the role's vars/ folder first), vault-encrypted
files included (engine/parsing/yamlfile.py decrypts them and keeps their values secret). A file name comes from
the playbook, -e or the play's variables, never from what a host returned (registered results, facts, a set_fact
built from them): such a name is refused, as docs/SAFETY.md's trust rule says.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine.errors import TaskError, UserError
from engine.parsing.yamlfile import check_variable_names, load_yaml
from engine.run.actions.call import ActionCall
from engine.template.markers import is_template
from engine.template.secrets import is_secret_name

VALID_EXTENSIONS = ["yaml", "yml", "json"]
DIR_ARGS = ("dir", "depth", "files_matching", "ignore_files", "extensions", "ignore_unknown_extensions")
FILE_ARGS = ("file",)
PATH_ARGS = ("file", "dir", "files_matching", "ignore_files")  # what no host's answer may choose


def read_vars_file(path: Path, what: str = "variables file") -> dict:
    """A variables file's mapping (an empty file: no variables); anything else is refused, naming the file."""
    data = load_yaml(path, what)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(f"{path}: a {what} must be a mapping of variable names to values, got {type(data).__name__}")
    check_variable_names(data, str(path))
    return data


# -- vars_files -----------------------------------------------------------------------------------------------------
def play_vars_files(entries: list, base: Path, render: Callable[[str], Any], where: str) -> dict:
    """The variables of a play's `vars_files`, later files winning: each entry a name (beside the playbook, or
    absolute) or a list of names of which the first that exists is read. `render` resolves a templated name with
    -e and the play's vars."""
    merged: dict = {}
    for entry in entries:
        choices = entry if isinstance(entry, list) else [entry]
        paths = [_play_path(_rendered_name(name, render, where), base) for name in choices]
        found = next((p for p in paths if p.is_file()), None)
        if found is None:
            looked = ", ".join(map(str, paths))
            raise UserError(f"{where}: vars_files: {'none of ' if len(paths) > 1 else ''}{looked} "
                            f"{'exists' if len(paths) > 1 else 'not found'}; fix the name (relative names are read "
                            "beside the playbook), or give a list whose last entry exists")
        merged.update(read_vars_file(found))
    return merged


def _rendered_name(name: str, render: Callable[[str], Any], where: str) -> str:
    try:
        value = render(name) if is_template(name) else name
    except Exception as exc:  # an undefined name: only -e and the play's vars are known before any host
        raise UserError(f"{where}: vars_files: cannot render {name!r} ({exc}); a vars_files name may use -e and the "
                        "play's vars only") from None
    if not (isinstance(value, str) and value.strip()):
        raise UserError(f"{where}: vars_files: {name!r} gave {value!r}, not a file name")
    return value.strip()


def _play_path(name: str, base: Path) -> Path:
    path = Path(os.path.expanduser(name))
    return path if path.is_absolute() else base / path


# -- include_vars ---------------------------------------------------------------------------------------------------
def include_vars(call: ActionCall) -> dict:
    """Ansible's include_vars: `file` (or the one-line name), or `dir` with depth / files_matching / ignore_files /
    extensions / ignore_unknown_extensions; `name` puts them under one variable; hash_behaviour merge deep-merges
    them into the variables of the same names. They become the host's variables above task vars and below set_fact
    (Ansible's include_vars precedence); the result lists the files read, as Ansible's."""
    args = call.args
    _refuse_host_data(call)
    if any(k in args for k in DIR_ARGS) and "file" in args:
        return _failed("include_vars: file and dir arguments do not mix (file; or dir with depth, files_matching, "
                       "ignore_files, extensions)")
    try:
        files = _dir_files(call) if "dir" in args else [_find_file(call)]
        loaded: dict = {}
        for path in files:
            loaded.update(read_vars_file(path))
    except (UserError, TaskError, re.error) as exc:
        return _failed(str(exc))
    if args.get("name"):
        loaded = {str(args["name"]): loaded}
    if args.get("hash_behaviour") == "merge":
        loaded = {k: _merged(call.view[k], v) if k in call.view else v for k, v in loaded.items()}
    owner = call.facts_owner
    for key, value in loaded.items():
        if is_secret_name(key):
            call.executor.variables.secrets.add(value)
    owner.included_vars.update(loaded)
    return {"changed": False, "ansible_facts": loaded, "ansible_included_var_files": [str(p) for p in files],
            "msg": f"included {len(files)} file(s): {', '.join(sorted(loaded)) or 'no variables'}"}


def _failed(msg: str) -> dict:
    return {"failed": True, "changed": False, "msg": msg, "message": msg}


def _refuse_host_data(call: ActionCall) -> None:
    for key in PATH_ARGS:
        taint = call.taints.get(key)
        if taint is not None and taint.hosts:
            raise TaskError(f"{call.where()}: the include_vars argument '{key}' is built from what a host returned "
                            f"({taint.describe()}), and a host's answer never chooses a file on the control node; "
                            "write the name in the playbook, or pick it from a list the playbook writes")


def _roots(call: ActionCall) -> list[Path]:
    """Where a relative name is looked for: the role's folder (its vars/ first), then the playbook's."""
    roots = [call.task.role_dir] if call.task.role_dir is not None else []
    return [*roots, call.play.source.parent]


def _find_file(call: ActionCall) -> Path:
    name = call.args.get("file")
    if not (isinstance(name, str) and name.strip()):
        raise TaskError(f"{call.where()}: include_vars needs a file name (file: vars.yml, or include_vars: vars.yml) "
                        "or dir; Could not find file")
    name = name.strip()
    path = Path(os.path.expanduser(name))
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [c for root in _roots(call) for c in (root / "vars" / name, root / name)]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise TaskError(f"{call.where()}: include_vars: Could not find file {name!r} (looked in "
                        f"{', '.join(map(str, dict.fromkeys(candidates)))})")
    return found


def _dir_root(call: ActionCall, name: str) -> Path:
    """The folder `dir` names: absolute as given; in a role, under its vars/ (a name starting with vars/: the
    role's own folder, as Ansible's); else beside the playbook."""
    path = Path(os.path.expanduser(name))
    if path.is_absolute():
        return path
    role = call.task.role_dir
    if role is None:
        return call.play.source.parent / path
    if path.parts[0] == "vars" and (role / path).exists():
        return role / path
    return role / "vars" / path


def _dir_files(call: ActionCall) -> list[Path]:
    """The files of `dir` to read, in Ansible's order: folders by path, files sorted in each, at most `depth` deep
    (0: any), matching `files_matching`, not `ignore_files`, with a known extension (a file without one fails,
    unless ignore_unknown_extensions); a role's vars/main.yml is never read again."""
    args = call.args
    root = _dir_root(call, str(args["dir"]))
    if not root.is_dir():
        raise TaskError(f"{call.where()}: include_vars: {root} {'is not a directory' if root.exists() else 'directory does not exist'}")
    depth = int(args.get("depth") or 0)
    matching = re.compile(str(args["files_matching"])) if args.get("files_matching") else None
    ignore = args.get("ignore_files") or []
    ignore = ignore.split() if isinstance(ignore, str) else [str(i) for i in ignore]
    extensions = args.get("extensions", VALID_EXTENSIONS)
    extensions = list(extensions) if isinstance(extensions, str) else [str(e) for e in extensions]
    role_main = call.task.role_dir / "vars" / "main.yml" if call.task.role_dir is not None else None
    found: list[Path] = []
    for folder, _dirs, names in sorted(os.walk(root, followlinks=True), key=lambda w: w[0]):
        if depth and len(Path(folder).relative_to(root).parts) + 1 > depth:
            continue
        for name in sorted(names):
            path = Path(folder) / name
            if path == role_main or (matching and not matching.search(name)):
                continue
            if any(re.search(f"{pattern}$", name) for pattern in ignore):
                continue
            ext = os.path.splitext(name)[1][1:]
            if ext not in extensions:
                if args.get("ignore_unknown_extensions"):
                    continue
                raise TaskError(f"{path} does not have a valid extension: {', '.join(extensions)}")
            found.append(path)
    return found


def _merged(old: Any, new: Any) -> Any:
    """hash_behaviour merge: mappings merged key by key, deep; anything else replaced."""
    if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return new
    out = dict(old)
    for key, value in new.items():
        out[key] = _merged(out[key], value) if key in out else value
    return out


# -- what preflight may know ------------------------------------------------------------------------------------
def include_vars_names(task: Any, playbook_dir: Path) -> set[str] | None:
    """The names an include_vars task may set, when its arguments are written out (no template): the `name`, or
    the keys of its file or folder; None when they are known only at run time."""
    args = task.args
    if isinstance(args.get("name"), str) and not is_template(args["name"]):
        return {args["name"]}
    if any(isinstance(v, str) and is_template(v) for v in args.values()):
        return None
    roots = [r for r in (task.role_dir, playbook_dir) if r is not None]
    names: set[str] = set()
    if "file" in args:
        rel = str(args["file"]).strip()
        for cand in ([Path(rel)] if Path(rel).is_absolute() else [c for r in roots for c in (r / "vars" / rel, r / rel)]):
            if cand.is_file():
                return set(_keys_of(cand))
        return names
    if "dir" in args:
        for root in ([Path(args["dir"])] if Path(str(args["dir"])).is_absolute() else
                     [r / "vars" / str(args["dir"]) for r in roots] + [r / str(args["dir"]) for r in roots]):
            for folder, _dirs, files in os.walk(root, followlinks=True):
                for name in files:
                    names |= set(_keys_of(Path(folder) / name))
    return names


def _keys_of(path: Path) -> list[str]:
    try:
        data = load_yaml(path, "variables file")
    except UserError:
        return []
    return [k for k in data if isinstance(k, str)] if isinstance(data, dict) else []
