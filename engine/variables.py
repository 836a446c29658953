"""The variables a task sees, layered with Ansible's precedence, and the secrets among them.

Layers, first wins: -e; loop item and `result`; registered results; set_fact values; facts; task vars;
role parameters; play vars; inventory (host, then groups); magic names; role defaults. The data layers
(loop item/result, registered, set_fact, facts, magic) are never rendered (engine/templating.py).
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

from engine.inventory import Inventory
from engine.playbook import Play, Task
from engine.results import HostState
from engine.secrets import Secrets, has_value, is_secret_name
from engine.templating import LazyVars, Templar

# Names every task may use besides variables: the magic layer, facts, and the `result` bound while
# changed_when/failed_when/until are evaluated.
MAGIC_VARS = {
    "inventory_hostname",
    "group_names",
    "groups",
    "hostvars",
    "ansible_check_mode",
    "ansible_diff_mode",
    "playbook_dir",
    "role_path",
    "omit",
    "facts",
    "result",
    "ansible_failed_task",
    "ansible_failed_result",
}


class Variables:
    """Builds each task's view of the variables and keeps the run's secrets."""

    def __init__(self, inventory: Inventory, extra_vars: dict, templar: Templar, *, check: bool, diff: bool) -> None:
        self.inventory = inventory
        self.extra_vars = extra_vars
        self.templar = templar
        self.check = check
        self.diff = diff
        self.secrets = Secrets()
        self._groups = {g: inventory.hosts_in(g) for g in inventory.groups}
        self._hostvars = {h: hv.vars for h, hv in inventory.hosts.items()}  # once, not per task and host

    def _magic(self, state: HostState, play: Play, task: Task | None) -> dict:
        host = state.host
        magic = {
            "inventory_hostname": host.name,
            "group_names": [g for g in host.groups if g != "all"],
            "groups": self._groups,
            "ansible_check_mode": self.check,
            "ansible_diff_mode": self.diff,
            "playbook_dir": str(play.source.parent),
            "omit": None,
        }
        if task is not None and task.role_dir is not None:
            magic["role_path"] = str(task.role_dir)
        return magic

    def view(self, state: HostState, play: Play, task: Task | None, extra: dict | None = None) -> LazyVars:
        magic = self._magic(state, play, task)
        # hostvars is inventory text (templates, rendered when read), so it sits outside the data layers.
        data = (extra or {}, state.registered, state.facts_set, {"facts": state.facts or {}}, magic)
        layers = ChainMap(
            self.extra_vars,
            data[0],
            state.registered,
            state.facts_set,
            data[3],
            task.vars if task else {},
            task.role_vars if task else {},
            play.vars,
            state.host.vars,
            magic,
            {"hostvars": self._hostvars},
            play.defaults,
        )
        return self.templar.view(layers, data)

    def collect_secrets(self, state: HostState, play: Play) -> None:
        """Remember the values of secret-named variables from every source this play gives the host."""
        views: list[tuple[LazyVars, Any]] = [(self.view(state, play, None), None)]
        seen: set[int] = set()
        for task in play.all_tasks():
            for layer in (task.vars, task.role_vars):
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

    @staticmethod
    def secret_touched(view: LazyVars) -> bool:
        """True when rendering with `view` read a secret-named variable that holds a value."""
        for name in list(view.touched):
            if is_secret_name(name):
                try:
                    if has_value(view[name]):
                        return True
                except Exception:  # noqa: S112 - an unrenderable value taints nothing; its task reports the error
                    continue
        return False
