"""The variables a task sees, layered with Ansible's precedence, and the secrets among them.

Layers, first wins: -e; loop item and `result`; registered results; set_fact values; facts; include_vars; task vars;
role parameters; play vars; Ansible's facts (ansible_facts, ansible_*); inventory (host, then groups); magic names;
role defaults. The data layers (loop item/result, registered, set_fact, facts, Ansible's facts, magic) are never
rendered (engine/template/templar.py).
`hostvars[NAME]` is host NAME's own view (HostVars): its inventory values rendered in its context, its
registered results, set_fact values and facts as data, as they were when the current task started.
"""

from __future__ import annotations

import os
import sys
from collections import ChainMap
from collections.abc import Iterator, Mapping
from typing import Any

from dflash_host.host.fact_names import FACT_NAMES
from engine.inventory.manager import Inventory
from engine.parsing.ansible_cfg import config_file
from engine.playbook.model import Play, Task
from engine.run.results import HostState
from engine.template.lookups import Origin
from engine.template.secrets import Display, Secrets, has_value, is_secret_name, secret_leaves
from engine.template.taint import close_frame, open_frame
from engine.template.templar import LazyVars, Templar

# Names every task may use besides variables: the magic layer, facts, and the `result` bound while
# changed_when/failed_when/until are evaluated.
MAGIC_VARS = {
    "inventory_hostname",
    "group_names",
    "groups",
    "hostvars",
    "ansible_play_hosts",
    "ansible_play_hosts_all",
    "ansible_play_batch",
    "ansible_play_name",
    "ansible_run_tags",
    "ansible_skip_tags",
    "ansible_check_mode",
    "ansible_diff_mode",
    "ansible_version",
    "ansible_loop_var",
    "ansible_index_var",
    "ansible_loop",
    "playbook_dir",
    "role_path",
    "role_name",
    "ansible_role_name",
    "omit",
    "inventory_hostname_short",
    "inventory_file",
    "inventory_dir",
    "ansible_playbook_python",
    "ansible_config_file",
    "ansible_play_role_names",
    "ansible_role_names",
    "ansible_dependent_role_names",
    "role_names",
    "ansible_parent_role_names",
    "ansible_parent_role_paths",
    "ansible_search_path",
    "ansible_verbosity",
    "ansible_forks",
    "ansible_inventory_sources",
    "ansible_limit",
    "play_hosts",
    "ansible_host",
    "ansible_connection",
    "facts",
    "result",
    "ansible_failed_task",
    "ansible_failed_result",
    "ansible_facts",
} | FACT_NAMES  # Ansible's facts as variables (engine/run/results.py fact_variables), once gathered


_NO_HOSTS: tuple[list[str], list[str]] = ([], [])  # a play not begun (secrets collected, preflight)

# ansible_version: the ansible-core release whose behaviour this engine follows and is measured against
# (docs/ANSIBLE.md), so that `ansible_version.full is version('2.9', '>=')` reads as it would there.
ANSIBLE_VERSION = {"full": "2.19.14", "major": 2, "minor": 19, "revision": 14, "string": "2.19.14"}


class DelegatedVars(Mapping):
    """`ansible_delegated_vars` of a task delegated to a host written in the playbook: {delegate: its variables},
    the delegate's view built only when read (a delegate outside the inventory: its name alone)."""

    SANDBOX_ATTRS = frozenset({"get", "keys", "items", "values"})

    def __init__(self, hostvars: HostVars, name: str) -> None:
        self._hostvars, self._name = hostvars, name

    def __getitem__(self, name: str) -> Any:
        if name != self._name:
            raise KeyError(name)
        return self._hostvars[name] if name in self._hostvars else {"inventory_hostname": name}

    def __iter__(self) -> Iterator[str]:
        return iter([self._name])

    def __len__(self) -> int:
        return 1


class HostVars(Mapping):
    """`hostvars`: every inventory host's variables, each host's view built only when a template reads it.

    One per task view (cheap: nothing is built until read). `masked`: for a message rendered again for display,
    where what is secret on a host reads as the mask."""

    SANDBOX_ATTRS = frozenset({"get", "keys", "items", "values"})  # a template reads hosts, nothing else

    def __init__(self, variables: Variables, play: Play, display: Display | None = None) -> None:
        self._variables = variables
        self._play = play
        self._views: dict[str, LazyVars] = {}
        self.display = display

    def for_display(self, display: Display) -> HostVars:
        return HostVars(self._variables, self._play, display)

    def __getitem__(self, name: str) -> LazyVars:
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = self._variables.host_view(name, self._play, self)
        return view

    def __contains__(self, name: object) -> bool:
        return name in self._variables.inventory.hosts or name in self._variables.states

    def __iter__(self) -> Iterator[str]:
        """The inventory's hosts, then a delegate the run started that is not one (the implicit localhost)."""
        hosts = self._variables.inventory.hosts
        return iter([*hosts, *(n for n in self._variables.states if n not in hosts)])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class HostView(LazyVars):
    """One host's variables read through hostvars. What is secret on that host (a secret-named variable, a
    no_log task's result or set_fact value) joins the run's secrets when read, so output shows it masked."""

    def __init__(self, layers: Mapping[str, Any], templar: Templar, data: tuple, clean: tuple, hidden: frozenset,
                 secrets: Secrets) -> None:
        super().__init__(layers, templar, data, clean)
        self._hidden = hidden
        self._secrets = secrets
        self.display: Display | None = None

    def __getitem__(self, key: str) -> Any:
        frame = open_frame()
        try:
            value = super().__getitem__(key)
            if (is_secret_name(key) or key in self._hidden) and has_value(value):
                self._secrets.add(value)
                frame.secret = True
        finally:
            close_frame(frame)
        if self.display is not None:
            return self.display.whole(value) if frame.secret else self.display.inside(value)
        return value


class Variables:
    """Builds each task's view of the variables and keeps the run's secrets."""

    def __init__(self, inventory: Inventory, extra_vars: dict, templar: Templar, *, check: bool, diff: bool) -> None:
        self.inventory = inventory
        self.extra_vars = extra_vars
        self.templar = templar
        self.check = check
        self.diff = diff
        self.secrets = Secrets()
        self.states: dict[str, HostState] = {}  # the run's hosts (the Runner's), read by hostvars
        self._groups = {g: inventory.hosts_in(g) for g in inventory.groups}
        self._play_hosts: dict[int, tuple[list[str], list[str]]] = {}  # id(play) -> (all, active at this task)
        self._batch: dict[int, list[str]] = {}  # id(play) -> the hosts of its batch now running (serial)
        self.run_tags: list[str] = ["all"]  # ansible_run_tags, ansible_skip_tags: the Runner's --tags / --skip-tags
        self.skip_tags: list[str] = []
        self._dirs: dict[int, str] = {}  # id(play) -> playbook_dir (Path to str costs a microsecond per view)
        self._roles: dict[int, list[str]] = {}  # id(play) -> ansible_play_role_names
        self._hosts: dict[str, dict] = {}  # host name -> its own magic names (inventory_file, ...)
        self.options: dict[str, Any] = {}  # the command line's: ansible_forks, ansible_verbosity, ansible_limit
        config = config_file()
        self._run = {"ansible_playbook_python": sys.executable, "ansible_config_file": str(config) if config else None,
                     "ansible_inventory_sources": [str(p.absolute()) for p in inventory.sources]}

    def refresh_groups(self) -> None:
        """`groups` again, after add_host or group_by grew the inventory (the same mapping: views hold it)."""
        fresh = {g: self.inventory.hosts_in(g) for g in self.inventory.groups}
        self._groups.clear()
        self._groups.update(fresh)

    def set_options(self, *, forks: int, verbosity: int, limit: str | None) -> None:
        """The command line's options, as Ansible's magic variables (ansible_limit only when --limit is given)."""
        self.options = {"ansible_forks": forks, "ansible_verbosity": verbosity,
                        **({"ansible_limit": limit} if limit else {})}

    def begin_play(self, play: Play, names: list[str]) -> None:
        """The hosts `play` targets (after --limit): ansible_play_hosts_all."""
        self._play_hosts[id(play)] = (list(names), list(names))
        self.publish(play)

    def begin_batch(self, play: Play, names: list[str]) -> None:
        """The hosts of the batch now running (the play's hosts without `serial`): ansible_play_batch."""
        self._batch[id(play)] = list(names)

    def publish(self, play: Play) -> None:
        """Before a task (or fact gathering) starts on the play's hosts: what each host shows the others through
        hostvars during it, and ansible_play_hosts (the play's hosts neither failed nor unreachable)."""
        for state in self.states.values():
            state.publish()
        everyone = self._play_hosts.get(id(play), _NO_HOSTS)[0]
        states = self.states
        self._play_hosts[id(play)] = (everyone, [h for h in everyone if h not in states or states[h].active])

    def _magic(self, state: HostState, play: Play, task: Task | None, hostvars: HostVars) -> dict:
        host = state.host
        everyone, active = self._play_hosts.get(id(play), _NO_HOSTS)
        batch = [h for h in self._batch.get(id(play), everyone) if h in active]
        roles = self._roles.get(id(play))
        if roles is None:
            roles = self._roles[id(play)] = list(dict.fromkeys(play.roles))
        magic = {
            **self._run,
            **self.options,
            **self._host_magic(host.name),
            "inventory_hostname": host.name,
            "group_names": sorted(g for g in host.groups if g != "all"),
            "groups": self._groups,
            "hostvars": hostvars,
            "ansible_play_hosts": active,
            "ansible_play_hosts_all": everyone,
            "ansible_play_batch": batch,
            "play_hosts": batch,
            "ansible_play_name": play.name,
            "ansible_play_role_names": roles,
            "role_names": roles,
            "ansible_role_names": roles,
            "ansible_run_tags": self.run_tags,
            "ansible_skip_tags": self.skip_tags,
            "ansible_check_mode": self.check,  # the command line's, as Ansible's (a task's check_mode keyword aside)
            "ansible_diff_mode": self.diff,
            "ansible_verbosity": self.options.get("ansible_verbosity", 0),
            "ansible_version": ANSIBLE_VERSION,
            "ansible_connection": play.connection or "ssh",  # below the inventory's, as ansible_host
            "playbook_dir": self._dirs.get(id(play)) or self._dirs.setdefault(id(play), str(play.source.parent)),
            "omit": None,  # a module argument that renders to it is left out (task_executor._rendered_args)
        }
        if task is not None:
            magic["ansible_search_path"] = search_path(task, magic["playbook_dir"])
        if task is not None and isinstance(task.delegate_to, str) and "{" not in task.delegate_to:
            magic["ansible_delegated_vars"] = DelegatedVars(hostvars, task.delegate_to)
        if task is not None and task.role_dir is not None:
            magic["role_path"] = str(task.role_dir)
        if task is not None and task.role:
            magic["role_name"] = magic["ansible_role_name"] = task.role
        return magic

    def _host_magic(self, name: str) -> dict:
        """inventory_hostname_short, and inventory_file / inventory_dir: the source that named the host first
        (none for the implicit localhost, as Ansible's)."""
        found = self._hosts.get(name)
        if found is None:
            # ansible_host: what Ansible's connection gives a task when the inventory sets none (the inventory's wins)
            found = {"inventory_hostname_short": name.split(".")[0], "ansible_host": name}
            source = self.inventory.host_source.get(name)
            if source is not None and source != "<inventory>":
                found |= {"inventory_file": source, "inventory_dir": os.path.dirname(source)}
            self._hosts[name] = found
        return found

    def view(self, state: HostState, play: Play, task: Task | None, extra: dict | None = None) -> LazyVars:
        hostvars = HostVars(self, play)
        magic = self._magic(state, play, task, hostvars)
        extra = extra or {}
        facts = {"facts": state.facts or {}}
        brought = task.include_names if task else {}  # a looped include's item, for the tasks it brought
        layers = ChainMap(
            self.extra_vars,
            extra,
            brought,
            state.registered,
            state.facts_set,
            facts,
            state.included_vars,
            task.vars if task else {},
            task.role_vars if task else {},
            play.vars,
            state.fact_vars,
            state.host.vars,
            magic,
            task.role_defaults if task else {},
            play.defaults,
        )
        view = self.templar.view(layers, (extra, brought, state.registered, state.facts_set, facts, state.fact_vars,
                                          magic), (magic,))
        view.origin = Origin(play, task, self.secrets)  # where lookups search, whom they name, what they mask
        view.provenance = ChainMap(state.loop_taint, state.provenance) if state.loop_taint else state.provenance
        if brought:
            view.provenance = ChainMap(state.loop_taint, task.include_taints, state.provenance)  # type: ignore[union-attr]
        view.host_taint = state.host_taint
        return view

    def host_view(self, name: str, play: Play, hostvars: HostVars) -> LazyVars:
        """hostvars[name]: that host's inventory values (rendered in its context, with the play's vars and role
        defaults below them), and as data its registered results, set_fact values and facts as published."""
        state = self.states.get(name)  # an inventory host's, or the implicit localhost's once a task delegated to it
        host = state.host if state is not None else self.inventory.hosts[name]  # KeyError: undefined in the template
        state = state or HostState(host)
        magic = self._magic(state, play, None, hostvars)
        facts = {"facts": state.shared_facts or {}}
        registered, facts_set = state.shared_registered, state.shared_facts_set
        layers = ChainMap(self.extra_vars, registered, facts_set, facts, state.shared_included_vars, play.vars,
                          state.shared_fact_vars, host.vars, magic, play.defaults)
        view = HostView(layers, self.templar, (registered, facts_set, facts, state.shared_fact_vars, magic), (magic,),
                        state.shared_hidden, self.secrets)
        view.origin = Origin(play, None, self.secrets)
        view.provenance, view.host_taint = state.shared_provenance, state.host_taint
        view.display = hostvars.display
        return view

    def collect_secrets(self, state: HostState, play: Play) -> None:
        """Remember the values of secret-named variables from every source this play gives the host."""
        views: list[tuple[LazyVars, Any]] = [(self.view(state, play, None), None)]
        seen: set[int] = set()
        for task in play.all_tasks():
            for layer in (task.vars, task.role_vars, task.role_defaults):
                if id(layer) not in seen and any(is_secret_name(k) for k in layer):
                    seen.add(id(layer))
                    views.append((self.view(state, play, task), layer))
        for view, layer in views:
            for name in layer if layer is not None else view:
                if is_secret_name(name):
                    try:
                        self.secrets.add(view[name])
                    except Exception:  # noqa: S112 - undefined or broken: preflight reports it, without the value
                        continue
        # a secret-named key inside an ordinary variable (creds: {user: u, password: ...}), as written
        for layer in (self.extra_vars, play.vars, state.host.vars, play.defaults,
                      *(m for task in play.all_tasks() for m in (task.vars, task.role_vars, task.role_defaults))):
            for name, value in layer.items():
                if not is_secret_name(name) and isinstance(value, (dict, list)):
                    self.secrets.add([v for v in secret_leaves(value) if not (isinstance(v, str) and "{{" in v)])


def search_path(task: Task, playbook_dir: str) -> list[str]:
    """ansible_search_path, where lookups and relative paths are searched, as Ansible's: a role's task, its
    role folder, the folder of the file it is written in, then the playbook's; another task, its file's folder."""
    written_in = task.source.rsplit(": task ", 1)[0] if ": task " in task.source else ""
    folder = os.path.dirname(written_in) or playbook_dir
    found = [str(task.role_dir), folder, playbook_dir] if task.role_dir is not None else [folder]
    return list(dict.fromkeys(found))
