"""Includes read when they are reached: include_tasks / include_role with a templated name or a loop.

The include task runs on each host as any task (its `when`, its loop, its name rendered with that host's
variables and the item); the `included` action (engine/run/actions/control.py) records, per host and item, what
it reached: a Reach. The Runner then reads each reached file once per group of hosts that reached it with the
same arguments and item (engine/playbook/tasks.py included_tasks / included_role: the checks a load makes), and
runs its tasks on those hosts together, one reach after another (each host's in the order of its items), as
Ansible's linear strategy runs an included file on the hosts that included it.

Trust rule (docs/SAFETY.md): what a host returned never chooses a file the control node reads, so a name whose
render read another host's answer (a registered result, a fact, hostvars, a set_fact built from them) fails the
include on that host, before anything is read. Names written in the playbook, its vars, -e, a first_found over
them and the item of a loop over a playbook list are the playbook's words.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.errors import TaskError
from engine.playbook.model import Include
from engine.playbook.tasks import included_role, included_tasks
from engine.run.trust import FIX, foreign
from engine.template.taint import Taint

if TYPE_CHECKING:
    from engine.run.actions.call import ActionCall
    from engine.run.results import HostState

NAME_ARGS = ("file", "name", "tasks_from")  # what chooses the file an include reads


@dataclass
class Reach:
    """One host's reach of an include (one per item of its loop): its rendered arguments and the loop's names."""

    args: dict
    names: dict = field(default_factory=dict)  # item (or loop_var), ansible_loop_var, the index_var, ansible_loop
    taints: dict = field(default_factory=dict)  # what each of those names carries

    def key(self) -> str:
        """What makes two hosts' reaches one: the same arguments and the same item."""
        return json.dumps([self.args, self.names], sort_keys=True, default=repr)


class Reaches:
    """Per host, the reaches of the include task it runs now, in the order of its items (hosts run in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_host: dict[str, list[Reach]] = {}

    def add(self, host: str, reach: Reach) -> None:
        with self._lock:
            self._by_host.setdefault(host, []).append(reach)

    def take(self, host: str) -> list[Reach]:
        with self._lock:
            return self._by_host.pop(host, [])


def reach_of(call: ActionCall) -> Reach:
    """What this host (and item) reached; a name built from another host's answer fails here."""
    check_name(call)
    task, view = call.task, call.view
    if task.loop is None:
        return Reach(dict(call.args))
    loop_var = str(call.executor.templar.render_value(task.loop_var, view))
    keys = [loop_var, "ansible_loop_var", "ansible_loop"]
    if task.loop_control.get("index_var"):
        keys += [str(task.loop_control["index_var"]), "ansible_index_var"]
    names = {k: view[k] for k in keys if k in view}
    taint = call.state.loop_taint.get(loop_var) or Taint()
    return Reach(dict(call.args), names, {k: taint for k in names})


def check_name(call: ActionCall) -> None:
    """The trust rule: the control node reads no file chosen by another host's answer."""
    for key in NAME_ARGS:
        hosts = foreign(call.taints.get(key))
        if hosts:
            raise TaskError(
                f"{call.where()}: the {call.task.module} {key} {call.args.get(key)!r} is built from what "
                f"{', '.join(hosts)} returned ({call.taints[key].describe()}), and a host's answer never chooses a "
                f"file the control node reads; name the file in the playbook, or pick it with first_found from "
                f"names the playbook writes; {FIX}.")


def rounds(states: list[HostState], reached: dict[str, list[Reach]]) -> list[tuple[Reach, list[tuple[HostState, int]]]]:
    """The reaches in the order they run: every host's first, then every host's second, ...; in each round the
    hosts that reached the same file with the same arguments and item together (in the play's host order), each
    with the number of its reach."""
    out: list[tuple[Reach, list[tuple[HostState, int]]]] = []
    depth = max((len(r) for r in reached.values()), default=0)
    for index in range(depth):
        groups: dict[str, tuple[Reach, list[tuple[HostState, int]]]] = {}
        for state in states:
            mine = reached.get(state.host.name, [])
            if index < len(mine):
                groups.setdefault(mine[index].key(), (mine[index], []))[1].append((state, index))
        out += groups.values()
    return out


def bring(include: Include, reach: Reach) -> list:
    """The tasks (and blocks) this reach brings: the file or role read now (a UserError names file and field)."""
    if include.marker.module == "include_role":
        return included_role(include, reach.args, reach.names, reach.taints)
    return included_tasks(include, str(reach.args.get("file")), reach.names, reach.taints)
