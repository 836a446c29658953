"""Inventory: Ansible's YAML and INI formats, inventory folders and several sources, with group_vars/
and host_vars/, read as ansible-inventory reads them.

Users reuse the inventories they already have, so the connection variables (`ansible_host`,
`ansible_port`, `ansible_user`, `ansible_ssh_private_key_file`, `ansible_connection`) keep their
Ansible names, host names take ranges (engine/inventory/ranges.py) and a host's variables merge in
ansible-inventory's order (see `_build_host`). Several sources (-i A -i B) load in order into one
inventory, later ones winning; a folder is every file in it (sorted) plus its group_vars/ and host_vars/.
Forms that stay unsupported (inventory scripts and plugins, TOML) are refused by name.
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.inventory.ini import parse_ini
from engine.inventory.ranges import expand, split_port
from engine.parsing import vault
from engine.parsing.yamlfile import check_variable_names, describe_name, leaf_texts, load_yaml, read_text, was_encrypted
from engine.template.secrets import mask_vault_values

IMPLICIT_LOCALHOST = ("localhost", "127.0.0.1")  # names Ansible gives the control node when the inventory lacks them


@dataclass
class Host:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)  # merged inventory variables
    groups: list[str] = field(default_factory=list)  # every group it belongs to, 'all' first

    @property
    def connection(self) -> str:
        return str(self.vars.get("ansible_connection", "ssh"))

    @property
    def address(self) -> str:
        return str(self.vars.get("ansible_host", self.name))

    @property
    def port(self) -> int:
        return int(self.vars.get("ansible_port", 22))

    @property
    def user(self) -> str | None:
        user = self.vars.get("ansible_user")
        return str(user) if user is not None else None


@dataclass
class Group:
    name: str
    hosts: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    vars: dict[str, Any] = field(default_factory=dict)
    parents: list[str] = field(default_factory=list)
    priority: int = 1  # ansible_group_priority: among groups of one depth, a higher one's vars win
    depth: int = 0  # longest chain of parents down from 'all'
    member_set: set[str] = field(default_factory=set, repr=False, compare=False)  # `hosts` as a set: membership in O(1)


_GROUP_KEYS = {"hosts", "vars", "children"}
_YAML_SUFFIXES = (".yaml", ".yml", ".json")
_VARS_SUFFIXES = ("", ".yml", ".yaml", ".json")  # group_vars/NAME, NAME.yml, ... : the first that exists
# What ansible-inventory skips in an inventory folder (INVENTORY_IGNORE_EXTS and the always-ignored names).
_IGNORED_IN_FOLDER = re.compile(
    r"^\.|^host_vars$|^group_vars$|^vars_plugins$|(\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|\.rst|\.orig|\.cfg|\.retry)$"
)


_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _check_entry_name(name: Any, where: str, kind: str) -> None:
    """Host and group names are strings (a bare number is accepted for hosts) that can name a file.

    They name group_vars/NAME and host_vars/NAME files, so a '/' or a leading '.' could reach outside them.
    """
    ok = isinstance(name, str) or (kind == "host" and isinstance(name, int) and not isinstance(name, bool))
    text = str(name)
    if not ok or not text.strip() or "/" in text or _NAME_CONTROL.search(text) or text.startswith("."):
        raise UserError(
            f"{where}: {kind} name {describe_name(name)} is not valid; a {kind} name is a non-empty string without "
            "'/' or control characters (a NUL, a newline, an escape) that does not start with '.' (quote it if YAML "
            "reads it as a number, true/false or null)."
        )


def _named_entries(value: Any, where: str, what: str, kind: str) -> dict:
    """`hosts:`/`children:` as a mapping of names to bodies (a list of names is accepted too)."""
    if value is None:
        return {}
    if isinstance(value, list):
        for item in value:
            _check_entry_name(item, where, kind)
        value = {str(item): None for item in value}
    if not isinstance(value, dict):
        raise UserError(f"{where}: {what} must be a mapping of {kind} names")
    for item in value:
        _check_entry_name(item, where, kind)
    return {str(k): v for k, v in value.items()}


def _check_port(host: str, port: Any, where: str) -> None:
    """`ansible_port` is read as a number when connecting; a bad one is refused before any host is touched."""
    if port is None:
        return
    number = int(port.strip()) if isinstance(port, str) and re.fullmatch(r"[0-9]{1,5}", port.strip()) else port
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise UserError(
            f"{where}: host '{host}': ansible_port must be a port number from 1 to 65535, got "
            f"{repr(port)[:40]}; fix it in the inventory (host vars, group vars or group_vars/host_vars files)."
        )


def _unsupported(path: Path, what: str, fix: str) -> UserError:
    return UserError(f"{path}: {what} is not supported; {fix}")


def _vars_files(base: Path, name: str) -> list[Path]:
    """group_vars/NAME (a file or a folder of files, walked sorted), else NAME.yml, NAME.yaml, NAME.json."""
    for suffix in _VARS_SUFFIXES:
        cand = base / f"{name}{suffix}"
        if cand.is_dir():
            return _folder_vars_files(cand)
        if cand.is_file():
            return [cand]
    return []


def _folder_vars_files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith(".") or entry.name.endswith("~"):
            continue
        if entry.is_dir() and not entry.suffix:
            found.extend(_folder_vars_files(entry))
        elif entry.is_file() and entry.suffix in _VARS_SUFFIXES:
            found.append(entry)
    return found


def _looks_like_yaml(text: str) -> bool:
    """The first line that says anything: 'name:' or '---' or '{' is YAML; '[group]' or a host line is INI."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        return line.startswith(("---", "{")) or bool(re.match(r"^[^\s\[=]+:(\s|$)", line))
    return True


def _as_paths(path: Any) -> list[Path]:
    if path is None:
        return []
    items = list(path) if isinstance(path, (list, tuple)) else [path]
    return [Path(p) for p in items if p]


class Inventory:
    """Hosts and groups with each host's variables merged in Ansible's order.

    `Inventory(path)` or `Inventory([path, ...])`: each a YAML file, an INI file or a folder, loaded in
    order (later sources win). `Inventory(data={...})`: a YAML-shaped mapping, without group_vars/.
    """

    def __init__(self, path: str | Path | list | tuple | None = None, data: dict | None = None) -> None:
        self.sources = _as_paths(path)
        self.path = self.sources[0] if len(self.sources) == 1 else None
        self.groups: dict[str, Group] = {"all": Group("all", children=["ungrouped"]),
                                         "ungrouped": Group("ungrouped", parents=["all"])}
        self._host_inline: dict[str, dict] = {}
        self.host_source: dict[str, str] = {}  # host -> the source file that named it first (inventory_file)
        self._direct_groups: dict[str, list[str]] | None = None
        self._vars_cache: dict[tuple[Path, str, str], dict] = {}
        self._defaults: dict = {}  # set_defaults: the CLI's connection and become options
        self._growing = threading.Lock()  # add_host / group_by of several hosts' threads (grow below)
        self.grows = False  # the playbook adds hosts or groups: a pattern matching none yet is no error
        self.added: list[str] = []  # hosts add_host brought, in order (the recap counts them)
        if data is not None:
            self._load_yaml_data(data, "<inventory>")
        elif not self.sources:
            raise UserError("no inventory given; pass -i FILE")
        for source in self.sources if data is None else []:
            self._load_source(source)
        self._vars_dirs = [s if s.is_dir() else s.parent for s in self.sources] if data is None else []
        self._link_to_all()
        self._set_depths()
        self._fill_ungrouped()
        self.hosts: dict[str, Host] = {}
        self._implicit: dict[str, Host] = {}  # the implicit localhost, made on first use (host())
        for name in self._host_inline:
            self.hosts[name] = self._build_host(name)

    @property
    def where(self) -> str:
        return ", ".join(map(str, self.sources)) or "<inventory>"

    # -- loading sources -----------------------------------------------------------------------
    def _load_source(self, path: Path) -> None:
        if path.is_dir():
            for entry in sorted(path.iterdir(), key=lambda p: p.name):
                if not _IGNORED_IN_FOLDER.search(entry.name):
                    self._load_source(entry)
        elif not path.exists() and "," in str(path) and "/" not in str(path):
            self._load_host_list(str(path))
        elif not path.exists():
            raise UserError(f"{path}: inventory not found; check the -i path")
        elif path.suffix in _YAML_SUFFIXES:
            self._load_yaml_file(path)
        elif path.suffix == ".toml":
            raise _unsupported(path, "a TOML inventory", "write it as YAML or INI.")
        else:
            self._load_text_inventory(path)

    def _load_host_list(self, text: str) -> None:
        """`-i 'web1,web2,'`: Ansible's host list (a comma marks it), each name a host of `all`."""
        names = [name.strip() for name in text.split(",") if name.strip()]
        self._load_yaml_data({"all": {"hosts": dict.fromkeys(names)}}, f"-i {text}")

    def _load_yaml_file(self, path: Path) -> None:
        data = load_yaml(path, "inventory")
        if isinstance(data, dict) and "plugin" in data:
            raise _unsupported(path, f"an inventory plugin configuration (plugin: {str(data['plugin'])[:60]})",
                               "only static YAML and INI inventories are read; write the hosts out (e.g. "
                               "`ansible-inventory -i THIS --list --yaml > hosts.yaml`) and use that file.")
        self._load_yaml_data(data, str(path))

    def _load_text_inventory(self, path: Path) -> None:
        """A file without a YAML suffix: an inventory script, YAML written without the suffix, or INI."""
        text = read_text(path, "inventory")
        if text.startswith("#!") and os.access(path, os.X_OK):
            raise _unsupported(path, "a dynamic inventory script", "only static YAML and INI inventories are read; "
                               "save its output (`ansible-inventory -i THIS --list --yaml > hosts.yaml`) and use that.")
        if _looks_like_yaml(text):
            self._load_yaml_file(path)
            return
        groups = parse_ini(text, path, set(self.groups))
        if was_encrypted(path):  # every value of an encrypted file is a secret, as in YAML
            for leaf in leaf_texts(groups):
                vault.remember_secret(leaf)
        self._load_ini_data(groups, str(path))

    def _load_yaml_data(self, data: Any, where: str) -> None:
        if data is None:
            return
        if not isinstance(data, dict):
            raise UserError(f"{where}: an inventory must be a mapping with a top-level 'all:' key")
        for name in data:
            _check_entry_name(name, where, "group")
        for name, body in data.items():
            self._load_group(name, body, where, parent=None)

    def _load_ini_data(self, groups: dict[str, dict], where: str) -> None:
        for name, body in groups.items():
            group = self._group(name, where)
            for host, hvars in body["hosts"].items():
                self._add_host(group, host, hvars, where)
            for key, value in body["vars"].items():
                self._set_group_var(group, key, value, where)
            for child in body["children"]:
                self._add_child(group, self._group(child, where), where)

    # -- building the graph --------------------------------------------------------------------
    def _group(self, name: str, where: str) -> Group:
        _check_entry_name(name, where, "group")
        return self.groups.setdefault(name, Group(name))

    def _add_child(self, parent: Group, child: Group, where: str) -> None:
        if child.name == parent.name:
            raise UserError(f"{where}: group '{parent.name}' lists itself as a child; remove it from its children.")
        if child.name == "all":
            raise UserError(f"{where}: group 'all' cannot be a child of '{parent.name}'; every group is already in 'all'.")
        if child.name not in parent.children:
            parent.children.append(child.name)
        if parent.name not in child.parents:
            child.parents.append(parent.name)

    def _add_host(self, group: Group, pattern: str, hvars: Any, where: str) -> None:
        """A host entry: its name may be a range and may carry ':port'; its variables are host variables."""
        if hvars is not None and not isinstance(hvars, dict):
            raise UserError(f"{where}: variables of host '{pattern}' must be a mapping")
        check_variable_names(hvars or {}, f"{where}: host '{pattern}'")
        name, port = split_port(str(pattern))
        for host in expand(name, where):
            _check_entry_name(host, where, "host")
            inline = self._host_inline.setdefault(host, {})
            self.host_source.setdefault(host, where)
            if port is not None:
                inline["ansible_port"] = port
            inline.update(hvars or {})
            if group.name != "all" and host not in group.member_set:
                group.hosts.append(host)
                group.member_set.add(host)
                self._direct_groups = None

    def _set_group_var(self, group: Group, key: Any, value: Any, where: str) -> None:
        check_variable_names([key], f"{where}: vars of group '{group.name}'")
        if key != "ansible_group_priority":
            group.vars[key] = value
            return
        try:
            group.priority = int(value)
        except (TypeError, ValueError):
            raise UserError(f"{where}: group '{group.name}': ansible_group_priority must be a whole number, got "
                            f"{repr(value)[:40]}.") from None

    def _load_group(self, name: str, body: Any, where: str, parent: str | None) -> None:
        group = self._group(name, where)
        if parent:
            self._add_child(self.groups[parent], group, where)
        if body is None:
            return
        if not isinstance(body, dict):
            raise UserError(f"{where}: group '{name}' must be a mapping with hosts/vars/children")
        bad = sorted(map(str, set(body) - _GROUP_KEYS))
        if bad:
            raise UserError(
                f"{where}: group '{name}' has unknown key(s) {', '.join(bad)}; a group may only have hosts, vars and children"
            )
        for host, hvars in _named_entries(body.get("hosts"), where, f"'hosts' of group '{name}'", "host").items():
            self._add_host(group, host, hvars, where)
        gvars = body.get("vars") or {}
        if not isinstance(gvars, dict):
            raise UserError(f"{where}: 'vars' of group '{name}' must be a mapping")
        for key, value in gvars.items():
            self._set_group_var(group, key, value, where)
        children = _named_entries(body.get("children"), where, f"'children' of group '{name}'", "group")
        for child, cbody in children.items():
            self._load_group(child, cbody, where, parent=name)

    def _link_to_all(self) -> None:
        """Groups without a parent belong to 'all' (ungrouped first, as in Ansible)."""
        top = self.groups["all"]
        for gname, group in self.groups.items():
            if gname != "all" and not group.parents:
                self._add_child(top, group, self.where)

    def _set_depths(self) -> None:
        """Each group's depth (longest chain down from 'all'); a cycle in children is refused by name."""
        order: list[str] = []
        state: dict[str, int] = {}  # 1 on the current path, 2 done
        for root in ["all", *self.groups]:  # groups in a loop have parents, so 'all' alone may not reach them
            if root not in state:
                self._walk_children(root, state, order)
        for name in reversed(order):  # parents before children
            for child in self.groups[name].children:
                self.groups[child].depth = max(self.groups[child].depth, self.groups[name].depth + 1)

    def _walk_children(self, root: str, state: dict[str, int], order: list[str]) -> None:
        """Depth-first without recursion (inventories may nest deep), appending each group once done."""
        stack: list[tuple[str, int]] = [(root, 0)]
        path: list[str] = []
        while stack:
            name, index = stack.pop()
            children = self.groups[name].children
            if index == 0:
                state[name] = 1
                path.append(name)
            if index < len(children):
                stack.append((name, index + 1))
                child = children[index]
                if state.get(child) == 1:
                    cycle = path[path.index(child):] + [child]
                    raise UserError(f"{self.where}: groups are children of each other in a loop "
                                    f"({' -> '.join(cycle)}); remove one of those children.")
                if child not in state:
                    stack.append((child, 0))
            else:
                state[name] = 2
                path.pop()
                order.append(name)

    def _fill_ungrouped(self) -> None:
        """'ungrouped' holds exactly the hosts in no other group."""
        grouped = {h for g, grp in self.groups.items() if g not in ("all", "ungrouped") for h in grp.hosts}
        self.groups["ungrouped"].hosts = [h for h in self._host_inline if h not in grouped]
        self.groups["ungrouped"].member_set = set(self.groups["ungrouped"].hosts)
        self._direct_groups = None

    # -- a host's variables --------------------------------------------------------------------
    def groups_of(self, host: str) -> list[str]:
        """All groups a host is in (directly or through children): 'all', then by depth, priority, name."""
        if self._direct_groups is None:  # host -> the groups that list it, built once (was a scan per host)
            index: dict[str, list[str]] = {}
            for g, grp in self.groups.items():
                for h in grp.hosts:
                    index.setdefault(h, []).append(g)
            self._direct_groups = index
        direct = self._direct_groups.get(host, [])
        found: set[str] = {"all"}
        stack = list(direct)
        while stack:
            g = stack.pop()
            if g in found:
                continue
            found.add(g)
            stack.extend(self.groups[g].parents)
        return sorted(found, key=lambda g: (self.groups[g].depth, self.groups[g].priority, g))

    def _file_vars(self, base: Path, folder: str, name: str) -> dict:
        """The merged variables of group_vars/NAME or host_vars/NAME beside one source (read once)."""
        key = (base, folder, name)
        if key not in self._vars_cache:
            merged: dict = {}
            for f in _vars_files(base / folder, name):
                data = load_yaml(f, "variables file") or {}
                if not isinstance(data, dict):
                    raise UserError(f"{f}: a variables file must be a mapping of names to values")
                check_variable_names(data, str(f))
                merged.update(data)
            self._vars_cache[key] = merged
        return self._vars_cache[key]

    def _build_host(self, name: str) -> Host:
        """ansible-inventory's order: inline vars of 'all', then of the other groups (by depth, priority,
        name), group_vars/all, group_vars/GROUP (per source, in source order), the host's inline vars,
        host_vars/HOST. Later wins."""
        groups = self.groups_of(name)
        merged: dict[str, Any] = {}
        for g in groups:
            merged.update(self.groups[g].vars)
        for base in self._vars_dirs:
            merged.update(self._file_vars(base, "group_vars", "all"))
        for base in self._vars_dirs:
            for g in groups[1:]:
                merged.update(self._file_vars(base, "group_vars", g))
        merged.update(self._host_inline.get(name, {}))
        for base in self._vars_dirs:
            merged.update(self._file_vars(base, "host_vars", name))
        _check_port(name, merged.get("ansible_port"), self.where)
        return Host(name=name, vars=merged, groups=groups)

    def set_defaults(self, defaults: dict) -> None:
        """Variables every host has unless the inventory gives it its own (ansible-playbook's -u, --private-key,
        -b, --become-user, -K: options below the inventory's variables, as in Ansible)."""
        self._defaults = dict(defaults)
        self._implicit.clear()
        for host in self.hosts.values():
            for key, value in defaults.items():
                host.vars.setdefault(key, value)

    def delegate_host(self, name: str) -> Host | None:
        """The host a task may be delegated to: an inventory host, or Ansible's implicit localhost. None for any
        other name."""
        if name in self.hosts:
            return self.hosts[name]
        return self._implicit_localhost(name) if name in IMPLICIT_LOCALHOST else None

    def host(self, name: str) -> Host:
        """A host a play or a task may name: an inventory host, or the implicit localhost (KeyError otherwise)."""
        found = self.delegate_host(name)
        if found is None:
            raise KeyError(name)
        return found

    def is_implicit(self, name: str) -> bool:
        """True for the implicit localhost (a name the inventory lacks): in no group, not in 'all'."""
        return name not in self.hosts and name in IMPLICIT_LOCALHOST

    def _implicit_localhost(self, name: str) -> Host:
        """Ansible's implicit localhost (the inventory has no host of that name): the control node itself,
        `ansible_connection: local` with the python running this tool, the 'all' group's variables and its own
        host_vars, in no group. One Host per name for the whole run (a play on it and a task delegated to it
        share it)."""
        if name not in self._implicit:
            merged: dict[str, Any] = dict(self.groups["all"].vars)
            for base in self._vars_dirs:
                merged.update(self._file_vars(base, "group_vars", "all"))
            for base in self._vars_dirs:
                merged.update(self._file_vars(base, "host_vars", name))
            merged.setdefault("ansible_connection", "local")
            merged.setdefault("ansible_python_interpreter", sys.executable)  # Ansible's ansible_playbook_python
            for key, value in self._defaults.items():
                merged.setdefault(key, value)
            self._implicit[name] = Host(name=name, vars=merged, groups=[])
        return self._implicit[name]

    # -- growing during a run (add_host, group_by) ----------------------------------------------
    def add_dynamic_host(self, name: str, groups: list[str], host_vars: dict, where: str) -> bool:
        """add_host: the host joins the inventory (or gets the variables and groups given), for the later plays;
        True when anything changed, as Ansible's `changed`."""
        with self._growing:
            _check_entry_name(name, where, "host")
            check_variable_names(host_vars, f"{where}: host '{name}'")
            inline = self._host_inline.setdefault(name, {})
            changed = name not in self.hosts or any(k not in inline or inline[k] != v for k, v in host_vars.items())
            if name not in self.hosts:
                self.added.append(name)
            self.host_source.setdefault(name, where)
            inline.update(host_vars)
            for group in groups:
                changed = self._join(name, group, ["all"], where) or changed
            self._rebuild(name)
            return changed

    def add_to_group(self, host: str, group: str, parents: list[str], where: str) -> bool:
        """group_by: the host joins `group` (made under `parents` when new); True when anything changed."""
        with self._growing:
            if host not in self.hosts:  # the implicit localhost: in the group's hosts (a play on it finds it), as
                # Ansible's group object holds it, yet in no host list, 'all' and its own groups unchanged
                return self._join(host, group, parents, where) if self.is_implicit(host) else False
            changed = self._join(host, group, parents, where)
            self._rebuild(host)
            return changed

    def _join(self, host: str, name: str, parents: list[str], where: str) -> bool:
        new = name not in self.groups
        group = self._group(name, where)
        changed = new
        for parent_name in parents if name != "all" else []:
            parent = self._group(parent_name, where)
            if parent_name not in ("all",) and not parent.parents:
                self._add_child(self.groups["all"], parent, where)
            if parent_name not in group.parents:
                self._add_child(parent, group, where)
                changed = True
        if host not in group.member_set and name not in ("all", "ungrouped"):
            group.hosts.append(host)
            group.member_set.add(host)
            changed = True
        self._direct_groups = None
        return changed

    def _rebuild(self, name: str) -> None:
        """A host's merged variables and groups after it joined something (its Host object kept: running
        hosts hold it)."""
        self._set_depths()
        self._fill_ungrouped()
        built = self._build_host(name)
        for key, value in self._defaults.items():
            built.vars.setdefault(key, value)
        host = self.hosts.setdefault(name, built)
        if host is not built:
            host.vars.clear()
            host.vars.update(built.vars)
            host.groups[:] = built.groups

    # -- selection -----------------------------------------------------------------------------
    def hosts_in(self, group: str) -> list[str]:
        out: list[str] = []
        taken: set[str] = set()
        stack, seen = [group], set()
        while stack:
            g = stack.pop(0)
            if g in seen:
                continue
            seen.add(g)
            if g == "all":
                return list(self.hosts)
            for h in self.groups[g].hosts:
                if h not in taken:
                    taken.add(h)
                    out.append(h)
            stack.extend(self.groups[g].children)
        return out

    def select(self, pattern: str, where: str = "pattern") -> list[str]:
        """Ansible-style host pattern: names, groups, globs, 'a:b' or 'a,b' unions, '&g' and '!g'."""
        parts = [p.strip() for p in pattern.replace(":", ",").split(",") if p.strip()]
        selected: list[str] = []
        for part in [p for p in parts if p[0] not in "!&"]:
            matched = self._match_one(part)
            if not matched and self.grows:  # add_host / group_by may make it later: Ansible skips the play
                continue
            if not matched:
                raise UserError(
                    f"{where}: '{part}' matches no host or group in {self.where}; "
                    f"hosts: {', '.join(self.hosts) or '(none)'}; groups: {', '.join(g for g in self.groups if g != 'all')}"
                )
            selected.extend(h for h in matched if h not in selected)
        if not any(p[0] not in "!&" for p in parts):
            selected = list(self.hosts)
        for part in [p for p in parts if p[0] == "&"]:
            keep = set(self._match_one(part[1:]))
            selected = [h for h in selected if h in keep]
        for part in [p for p in parts if p[0] == "!"]:
            drop = set(self._match_one(part[1:]))
            selected = [h for h in selected if h not in drop]
        return selected

    def _match_one(self, part: str) -> list[str]:
        if part in self.groups:
            return self.hosts_in(part)
        if part in self.hosts or part in IMPLICIT_LOCALHOST:  # named alone, the implicit localhost (never by 'all')
            return [part]
        if any(c in part for c in "*?["):
            hits = [h for h in self.hosts if fnmatch.fnmatchcase(h, part)]
            for g in self.groups:
                if g != "all" and fnmatch.fnmatchcase(g, part):
                    hits.extend(h for h in self.hosts_in(g) if h not in hits)
            return hits
        return []

    # -- ansible-inventory compatible output -------------------------------------------------------
    def as_list(self) -> dict:
        """ansible-inventory --list's shape; values that came from Ansible Vault are shown masked."""
        out: dict[str, Any] = {}
        seen: set[str] = set()
        self._list_group("all", out, seen)
        hostvars = {h: host.vars for h, host in self.hosts.items() if host.vars}
        out["_meta"] = {"hostvars": mask_vault_values(hostvars)}
        return out

    def _list_group(self, name: str, out: dict, seen: set[str]) -> None:
        """A group's entry (hosts, children) before its children's; empty groups are left out, as Ansible does."""
        group = self.groups[name]
        entry: dict[str, Any] = {}
        out[name] = entry
        if name != "all" and group.hosts:
            entry["hosts"] = list(group.hosts)
        if group.children:
            entry["children"] = list(group.children)
        for child in group.children:
            if child not in seen:
                seen.add(child)
                self._list_group(child, out, seen)
        if not entry:
            del out[name]

    def host_vars(self, name: str) -> dict:
        """A host's variables as `invoke inventory --host` shows them: values from Ansible Vault masked.

        Code that needs the real values (connecting, templating) reads `self.hosts[name].vars`."""
        if name not in self.hosts:
            raise UserError(
                f"host '{name}' is not in {self.where}; known hosts: {', '.join(self.hosts) or '(none)'}"
            )
        return mask_vault_values(self.hosts[name].vars)
