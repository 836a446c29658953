"""--start-at-task: where a run starts, as ansible-playbook's option does.

The first task (in play order, blocks opened, handlers not) whose name matches the pattern, as a glob or exactly,
by its own name or as "ROLE : NAME" for a role's task, is where the run starts: the tasks before it are not run,
nor the plays before its play (no connection, no facts), nor its play's fact gathering. Every task after it runs
as usual. A pattern no task matches is refused before any host is touched (Ansible: "No matching task").
"""

from __future__ import annotations

import fnmatch

from engine.errors import UserError
from engine.playbook.model import Play, Task, walk_tasks


def matches(task: Task, pattern: str) -> bool:
    names = [task.name] + ([f"{task.role} : {task.name}"] if task.role else [])
    return any(name == pattern or fnmatch.fnmatchcase(name, pattern) for name in names)


def check_start_at_task(plays: list[Play], pattern: str | None) -> None:
    if pattern is None:
        return
    if not any(matches(t, pattern) for play in plays for t in walk_tasks(play.tasks)):
        names = [t.name for play in plays for t in walk_tasks(play.tasks)][:12]
        raise UserError(f"--start-at-task '{pattern}' matches no task of the playbook (a task's name, a glob, or "
                        f"'ROLE : NAME'); its tasks begin: {', '.join(names) or '(none)'}")


class StartAt:
    """Which tasks a run skips before its start task; `pending` until it is reached."""

    def __init__(self, pattern: str | None) -> None:
        self.pattern = pattern

    @property
    def pending(self) -> bool:
        return self.pattern is not None

    def in_play(self, play: Play) -> bool:
        return self.pattern is not None and any(matches(t, self.pattern) for t in walk_tasks(play.tasks))

    def skips(self, task: Task) -> bool:
        """True for a task before the start task; the start task itself ends the skipping."""
        if self.pattern is None:
            return False
        if matches(task, self.pattern):
            self.pattern = None
            return False
        return True
