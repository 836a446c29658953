"""Inventory: Ansible's YAML format (all/hosts/vars/children) plus group_vars/ and host_vars/.

Users reuse the inventories they already have, so the connection variables (`ansible_host`,
`ansible_port`, `ansible_user`, `ansible_ssh_private_key_file`, `ansible_connection`) keep their
Ansible names and precedence.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.yamlfile import check_variable_names, describe_name, load_yaml


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


_GROUP_KEYS = {"hosts", "vars", "children"}


def _check_entry_name(name: Any, where: str, kind: str) -> None:
    """Host and group names are strings (a bare number is accepted for hosts) that can name a file.

    They name group_vars/NAME and host_vars/NAME files, so a '/' or a leading '.' could reach outside them.
    """
    ok = isinstance(name, str) or (kind == "host" and isinstance(name, int) and not isinstance(name, bool))
    text = str(name)
    if not ok or not text.strip() or "/" in text or "\0" in text or text.startswith("."):
        raise UserError(
            f"{where}: {kind} name {describe_name(name)} is not valid; a {kind} name is a non-empty string without "
            "'/' that does not start with '.' (quote it if YAML reads it as a number, true/false or null)."
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


def _check_port(host: str, port: Any, path: Path | None) -> None:
    """`ansible_port` is read as a number when connecting; a bad one is refused before any host is touched."""
    if port is None:
        return
    number = int(port.strip()) if isinstance(port, str) and re.fullmatch(r"[0-9]{1,5}", port.strip()) else port
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= 65535:
        raise UserError(
            f"{path or '<inventory>'}: host '{host}': ansible_port must be a port number from 1 to 65535, got "
            f"{repr(port)[:40]}; fix it in the inventory (host vars, group vars or group_vars/host_vars files)."
        )


class Inventory:
    """Hosts and groups with each host's variables merged in Ansible's order."""

    def __init__(self, path: str | Path | list | tuple | None = None, data: dict | None = None) -> None:
        if isinstance(path, (list, tuple)):  # several -i: interface first, the merging follows
            path = path[-1] if path else None
        self.path = Path(path) if path else None
        self.groups: dict[str, Group] = {"all": Group("all")}
        self._host_inline: dict[str, dict] = {}
        if data is None:
            if self.path is None:
                raise UserError("no inventory given; pass -i FILE")
            data = load_yaml(self.path, "inventory")
        if data is None:
            data = {}
        where = str(self.path or "<inventory>")
        if not isinstance(data, dict):
            raise UserError(f"{where}: an inventory must be a mapping with a top-level 'all:' key")
        for name in data:
            _check_entry_name(name, where, "group")
        unknown_top = [k for k in data if k != "all"]
        for name in unknown_top:  # Ansible allows top-level groups besides 'all'
            self.groups["all"].children.append(name)
        for name, body in data.items():
            self._load_group(name, body, where, parent=None)
        self._link_ungrouped()
        self.hosts: dict[str, Host] = {}
        for name in self._host_inline:
            self.hosts[name] = self._build_host(name)

    # -- loading -------------------------------------------------------------------------------
    def _load_group(self, name: str, body: Any, where: str, parent: str | None) -> None:
        group = self.groups.setdefault(name, Group(name))
        if parent and parent not in group.parents:
            group.parents.append(parent)
        if body is None:
            return
        if not isinstance(body, dict):
            raise UserError(f"{where}: group '{name}' must be a mapping with hosts/vars/children")
        bad = sorted(set(body) - _GROUP_KEYS)
        if bad:
            raise UserError(
                f"{where}: group '{name}' has unknown key(s) {', '.join(bad)}; a group may only have hosts, vars and children"
            )
        hosts = _named_entries(body.get("hosts"), where, f"'hosts' of group '{name}'", "host")
        for host, hvars in hosts.items():
            host = str(host)
            if hvars is not None and not isinstance(hvars, dict):
                raise UserError(f"{where}: variables of host '{host}' must be a mapping")
            check_variable_names(hvars or {}, f"{where}: host '{host}'")
            self._host_inline.setdefault(host, {}).update(hvars or {})
            if host not in group.hosts:
                group.hosts.append(host)
        gvars = body.get("vars") or {}
        if not isinstance(gvars, dict):
            raise UserError(f"{where}: 'vars' of group '{name}' must be a mapping")
        check_variable_names(gvars, f"{where}: vars of group '{name}'")
        group.vars.update(gvars)
        children = _named_entries(body.get("children"), where, f"'children' of group '{name}'", "group")
        for child, cbody in children.items():
            if child == name:
                raise UserError(f"{where}: group '{name}' lists itself as a child")
            if child not in group.children:
                group.children.append(child)
            self._load_group(child, cbody, where, parent=name)

    def _link_ungrouped(self) -> None:
        for gname, group in self.groups.items():
            if gname != "all" and not group.parents:
                group.parents.append("all")
                if gname not in self.groups["all"].children:
                    self.groups["all"].children.append(gname)

    def _extra_vars_file(self, folder: str, name: str) -> dict:
        """group_vars/NAME.yaml (or .yml, or no suffix, or a folder of such files) beside the inventory."""
        if self.path is None:
            return {}
        base = self.path.parent / folder
        merged: dict = {}
        candidates = [base / f"{name}.yaml", base / f"{name}.yml", base / name]
        for cand in candidates:
            if cand.is_dir():
                files = sorted(p for p in cand.iterdir() if p.suffix in (".yaml", ".yml"))
            elif cand.is_file():
                files = [cand]
            else:
                continue
            for f in files:
                data = load_yaml(f, "variables file") or {}
                if not isinstance(data, dict):
                    raise UserError(f"{f}: a variables file must be a mapping of names to values")
                check_variable_names(data, str(f))
                merged.update(data)
            break
        return merged

    def _depth(self, name: str, seen: tuple = ()) -> int:
        group = self.groups[name]
        if name == "all" or not group.parents or name in seen:
            return 0
        return 1 + max(self._depth(p, seen + (name,)) for p in group.parents)

    def groups_of(self, host: str) -> list[str]:
        """All groups a host is in (directly or through children), shallowest first."""
        direct = [g for g, grp in self.groups.items() if host in grp.hosts]
        found: set[str] = {"all"}
        stack = list(direct)
        while stack:
            g = stack.pop()
            if g in found:
                continue
            found.add(g)
            stack.extend(self.groups[g].parents)
        return sorted(found, key=lambda g: (self._depth(g), g))

    def _build_host(self, name: str) -> Host:
        groups = self.groups_of(name)
        merged: dict[str, Any] = {}
        for g in groups:  # inline group vars, parents before children
            merged.update(self.groups[g].vars)
        for g in groups:  # group_vars/ files override inline group vars
            merged.update(self._extra_vars_file("group_vars", g))
        merged.update(self._host_inline.get(name, {}))
        merged.update(self._extra_vars_file("host_vars", name))
        _check_port(name, merged.get("ansible_port"), self.path)
        return Host(name=name, vars=merged, groups=groups)

    # -- selection -----------------------------------------------------------------------------
    def hosts_in(self, group: str) -> list[str]:
        out: list[str] = []
        stack, seen = [group], set()
        while stack:
            g = stack.pop(0)
            if g in seen:
                continue
            seen.add(g)
            if g == "all":
                return list(self.hosts)
            out.extend(h for h in self.groups[g].hosts if h not in out)
            stack.extend(self.groups[g].children)
        return out

    def select(self, pattern: str, where: str = "pattern") -> list[str]:
        """Ansible-style host pattern: names, groups, globs, 'a:b' or 'a,b' unions, '&g' and '!g'."""
        parts = [p.strip() for p in pattern.replace(":", ",").split(",") if p.strip()]
        selected: list[str] = []
        for part in [p for p in parts if p[0] not in "!&"]:
            matched = self._match_one(part)
            if not matched:
                raise UserError(
                    f"{where}: '{part}' matches no host or group in {self.path or 'the inventory'}; "
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
        if part in self.hosts:
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
        out: dict[str, Any] = {"_meta": {"hostvars": {h: host.vars for h, host in self.hosts.items()}}}
        for gname, group in self.groups.items():
            entry: dict[str, Any] = {}
            if group.children:
                entry["children"] = list(group.children)
            if group.hosts:
                entry["hosts"] = list(group.hosts)
            out[gname] = entry
        ungrouped = [h for h in self.hosts if self.groups_of(h) == ["all"]]
        if ungrouped:
            out["ungrouped"] = {"hosts": ungrouped}
            out["all"].setdefault("children", []).append("ungrouped")
        return out

    def host_vars(self, name: str) -> dict:
        if name not in self.hosts:
            raise UserError(
                f"host '{name}' is not in {self.path or 'the inventory'}; known hosts: {', '.join(self.hosts) or '(none)'}"
            )
        return self.hosts[name].vars
