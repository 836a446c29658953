"""One engine action's call: the task, its rendered arguments, the variables it saw, its host and its delegate,
and the way back to the task executor for module calls."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.playbook.model import Play, Task
from engine.run.results import HostState
from engine.template.taint import Taint, union

if TYPE_CHECKING:
    from engine.run.task_executor import TaskExecutor
    from engine.template.templar import LazyVars


@dataclass
class ActionCall:
    """One action's call: the task, its rendered args, the variables it saw, and a way to call modules."""

    executor: TaskExecutor
    state: HostState
    play: Play
    task: Task
    args: dict
    view: LazyVars
    check: bool
    target: HostState | None = None  # where its module calls and uploads go (delegate_to); None: `state` itself
    taints: dict = field(default_factory=dict)  # what each argument's render read (engine/template/taint.py)

    @property
    def taint(self) -> Taint:
        return union(self.taints.values())

    @property
    def on(self) -> HostState:
        """The host the action's module calls and uploads reach."""
        return self.target or self.state

    @property
    def facts_owner(self) -> HostState:
        """Whose variables set_fact sets: the delegate's only with delegate_facts, as in Ansible."""
        return self.on if self.task.delegate_facts else self.state

    def module(self, name: str, args: dict, check: bool | None = None) -> dict:
        return self.executor.module(self.on, name, args, self.check if check is None else check, self.task)

    def truth(self, expr: Any) -> bool:
        return self.executor.truth(expr, self.view)

    def where(self) -> str:
        return f"{self.task.source} ('{self.task.name}')"
