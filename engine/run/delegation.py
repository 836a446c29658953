"""delegate_to: where a task's module runs when it is not the host the task belongs to.

As in Ansible, the task stays the original host's: its variables render the task (and `delegate_to` itself),
its `when` decides, its `register` holds the result, the recap counts it there. Only the module call goes to the
delegate's worker (an inventory host, or the implicit localhost: engine/inventory/manager.py delegate_host). A delegate
outside the play is reached on first use, as its own host: connection, become for the play, the host lock
(engine/run/host_start.py), no facts; if it cannot be reached, the delegating host is unreachable, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Callable

from engine.errors import HostUnreachable, TaskError
from engine.playbook.model import Play, Task
from engine.run.results import HostState
from engine.run.trust import check_delegate

if TYPE_CHECKING:
    from engine.inventory.manager import Inventory
    from engine.run.host_start import HostStart
    from engine.template.templar import Templar


class Delegation:
    """Finds (and, the first time, starts) the host a delegated task runs on."""

    def __init__(self, inventory: Inventory, state_of: Callable[[str], HostState], hosts: HostStart,
                 templar: Templar, states: Mapping[str, HostState]) -> None:
        self.inventory, self.state_of, self.hosts, self.templar = inventory, state_of, hosts, templar
        self.states = states  # the run's hosts: whose answers are the control node's own (engine/run/trust.py)

    def name(self, task: Task, view) -> str:
        """The delegate's name, rendered with the delegating host's variables (and the loop item); never chosen by
        what a host returned (engine/run/trust.py)."""
        rendered, taint = self.templar.render_tracked(task.delegate_to, view)
        if not (isinstance(rendered, str) and rendered.strip()):
            raise TaskError(f"{task.source} ('{task.name}'): delegate_to gave {rendered!r}, not a host name; fix the "
                            "template or the variable it reads")
        check_delegate(task, rendered.strip(), taint)
        return rendered.strip()

    def target(self, state: HostState, play: Play, task: Task, view, connect: bool) -> HostState:
        """The state of the host the module runs on (`state` itself when not delegated); connected when
        `connect` (an engine action that only runs here, such as debug or set_fact, needs no connection)."""
        if task.delegate_to is None:
            return state
        name = self.name(task, view)
        if name == state.host.name:
            return state
        host = self.inventory.delegate_host(name)
        if host is None:
            raise TaskError(
                f"{task.source} ('{task.name}'): delegate_to '{name}' is not a host of the inventory "
                f"({self.inventory.where}); add it there (its address and ssh settings), or delegate to localhost")
        delegate = self.state_of(name)
        if connect:
            with delegate.client_lock:  # one start, whichever host's thread gets here first
                self._start(delegate, play, state.host.name)
        return delegate

    def _start(self, delegate: HostState, play: Play, for_host: str) -> None:
        """Reach the delegate once (a host that failed a task earlier still takes delegated ones, as in Ansible;
        one whose start failed, its lock held by another run say, takes none)."""
        if delegate.client is None and not delegate.unreachable:
            self.hosts.start(delegate, replace(play, gather_facts=False))
        if delegate.unreachable:
            raise HostUnreachable(f"delegate_to {delegate.host.name} (for {for_host}): {delegate.unreachable_msg}")
        if delegate.client is None or not delegate.locked:
            why = delegate.last_failure.msg if delegate.last_failure is not None else "its start failed in this run"
            raise TaskError(f"delegate_to {delegate.host.name} (for {for_host}) cannot take tasks: {why}")
